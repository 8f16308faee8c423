package traces

// liveInfo is what a reader keeps about a live allocation.
type liveInfo struct {
	key    uint64
	size   int64
	stream uint64
	slot   int32
	device int32
}

// emptyKey marks a free entry of a liveTable; no ID from a reader has both
// top bits set.
const emptyKey = ^uint64(0)

// A liveTable maps the IDs of live allocations to their liveInfo: an
// open-addressing hash table with linear probing and backward-shift
// deletion, kept at most half full. Lookups, inserts and deletes cost O(1)
// expected and allocate nothing except when the table grows; its memory is
// proportional to the peak number of live allocations.
type liveTable struct {
	e     []liveInfo
	n     int // entries in use
	shift uint
}

func (t *liveTable) init(logSize uint) {
	t.e = make([]liveInfo, 1<<logSize)
	for i := range t.e {
		t.e[i].key = emptyKey
	}
	t.n = 0
	t.shift = 64 - logSize
}

func (t *liveTable) home(key uint64) int {
	return int((key * 0x9e3779b97f4a7c15) >> t.shift)
}

// find returns the index of key's entry, or -1.
func (t *liveTable) find(key uint64) int {
	mask := len(t.e) - 1
	for i := t.home(key); ; i = (i + 1) & mask {
		switch t.e[i].key {
		case key:
			return i
		case emptyKey:
			return -1
		}
	}
}

// insert adds v unless its key is present; it reports whether it added v.
func (t *liveTable) insert(v liveInfo) bool {
	if 2*(t.n+1) > len(t.e) {
		t.grow()
	}
	mask := len(t.e) - 1
	for i := t.home(v.key); ; i = (i + 1) & mask {
		switch t.e[i].key {
		case v.key:
			return false
		case emptyKey:
			t.e[i] = v
			t.n++
			return true
		}
	}
}

// removeAt deletes the entry at index i, shifting back the entries after it
// that would no longer be found.
func (t *liveTable) removeAt(i int) {
	mask := len(t.e) - 1
	for j := (i + 1) & mask; t.e[j].key != emptyKey; j = (j + 1) & mask {
		// Move entry j into the hole at i if its home is not in (i, j].
		h := t.home(t.e[j].key)
		if (j-h)&mask >= (j-i)&mask {
			t.e[i] = t.e[j]
			i = j
		}
	}
	t.e[i].key = emptyKey
	t.n--
}

func (t *liveTable) grow() {
	old := t.e
	t.init(uint(64-t.shift) + 1)
	for _, v := range old {
		if v.key != emptyKey {
			t.insert(v)
		}
	}
}
