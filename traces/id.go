package traces

import "strconv"

// Layout of the ID of an [Event]: the two top bits tell how the id was
// written, the rest is its value.
const (
	idValueBits = 62
	idValueMask = 1<<idValueBits - 1
	idHexTag    = 1 << 62 // the id was written in hexadecimal: "0x7f3a00000000"
	idTokenTag  = 1 << 63 // the id was another token, interned by the reader
)

// idKeyOf returns the [Event] ID of an id written as tok, if tok is the
// canonical text of a number below 2^62:
//
//   - decimal without leading zeros ("0", "7", "140737488355328"): the ID is
//     the number itself;
//   - "0x" and lower-case hexadecimal without leading zeros ("0x0",
//     "0x7f3a00000000"): the ID is the number with bit 62 set, so that "10"
//     and "0xa" stay distinct ids, as their texts are.
//
// Any other token ("007", "0X7F", "buf-3", "-1") is not a number and ok is
// false. The checker interns such a token while its allocation is live: the
// allocation gets the ID 1<<63 | n, where n counts the allocations of such
// ids the reader has yielded before. Either way, two ids of a trace are the
// same id exactly when their texts are equal.
//
// Numbers are the fast path: a reader handles them without allocating, while
// it keeps a copy of each interned token for as long as its allocation is live.
func idKeyOf[T string | []byte](tok T) (uint64, bool) {
	if len(tok) == 0 {
		return 0, false
	}
	if len(tok) > 2 && tok[0] == '0' && tok[1] == 'x' {
		return parseHexID(tok[2:])
	}
	if tok[0] == '0' && len(tok) > 1 {
		return 0, false // leading zero
	}
	if len(tok) > 19 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(tok); i++ {
		d := tok[i] - '0'
		if d > 9 {
			return 0, false
		}
		v = v*10 + uint64(d) // 19 digits cannot overflow a uint64
	}
	if v > idValueMask {
		return 0, false
	}
	return v, true
}

// parseHexID parses the digits of a canonical hexadecimal id.
func parseHexID[T string | []byte](h T) (uint64, bool) {
	if len(h) == 0 || len(h) > 16 || (h[0] == '0' && len(h) > 1) {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	if v > idValueMask {
		return 0, false
	}
	return v | idHexTag, true
}

// formatID returns the text a [Writer] writes for an Event's ID: the
// decimal or hexadecimal number of an ID from idKeyOf, and "t" followed by a
// decimal number for any other ID (interned tokens). Distinct IDs give
// distinct texts, and a text read back gives the same pairing of allocs and
// frees; a trace decoded, written and decoded again yields the same IDs.
func formatID(id uint64) string {
	return string(appendID(nil, id))
}

// appendID appends formatID(id) to dst and returns the extended slice.
func appendID(dst []byte, id uint64) []byte {
	switch {
	case id&idTokenTag != 0:
		dst = append(dst, 't')
		return strconv.AppendUint(dst, id&^idTokenTag, 10)
	case id&idHexTag != 0:
		dst = append(dst, '0', 'x')
		return strconv.AppendUint(dst, id&idValueMask, 16)
	}
	return strconv.AppendUint(dst, id, 10)
}

// IDText returns the text of the event's ID as a [Writer] writes it: the
// id of the trace when it was a number ("7", "0x7f3a00000000"), else "t"
// and the number the reader gave it.
func (e Event) IDText() string { return formatID(e.ID) }

// HexID returns the number of the event's ID and whether the trace wrote
// it in hexadecimal ("0x7f3a00000000": a PyTorch snapshot's addresses),
// as IDText would show it, without making the text.
func (e Event) HexID() (uint64, bool) {
	return e.ID & idValueMask, e.ID&(idHexTag|idTokenTag) == idHexTag
}
