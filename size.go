package gpualloc

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Size units accepted by [ParseSize]: binary (KiB = 1024) and decimal
// (KB = 1000), matched without regard to case.
var sizeUnits = []struct {
	name string
	mult int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"PiB", 1 << 50}, {"EiB", 1 << 60},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15}, {"EB", 1e18},
	{"B", 1},
}

// A sizeError is a size that [ParseSize] refuses, with what is wrong.
type sizeError struct {
	Text   string // the size as given
	Reason string // "not a number", "more than the largest size, ..."
}

func (e *sizeError) Error() string { return fmt.Sprintf("bad size %q: %s", e.Text, e.Reason) }

// ParseSize parses a byte count: plain bytes ("4096") or a number with a
// unit, binary (B, KiB, MiB, GiB, TiB, PiB, EiB) or decimal (KB, MB, GB,
// TB, PB, EB), as in "80GiB", "2 MiB" or "5.41GiB". A number with a unit
// may have a fraction, and is rounded to the nearest byte (5.41GiB is
// 5808943268 bytes); plain bytes are whole. The result is non-negative and
// fits in an int64: at most 8 EiB less one byte. An error names the
// size and says what is wrong with it: bad size "lots": want bytes or a
// number with a unit such as MiB.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	unit := ""
	for _, u := range sizeUnits {
		if len(t) >= len(u.name) && strings.EqualFold(t[len(t)-len(u.name):], u.name) {
			mult, unit = u.mult, u.name
			t = strings.TrimSpace(t[:len(t)-len(u.name)])
			break
		}
	}
	if strings.HasPrefix(t, "-") && isDecimal(t[1:]) {
		return 0, &sizeError{s, "negative"}
	}
	v, ok := new(big.Rat).SetString(t)
	if !ok || !isDecimal(t) {
		return 0, &sizeError{s, "want bytes or a number with a unit such as MiB"}
	}
	if !v.IsInt() && (unit == "" || unit == "B") {
		return 0, &sizeError{s, "not a whole number of bytes (a fraction needs a unit, as in 1.5KiB)"}
	}
	v.Mul(v, new(big.Rat).SetInt64(mult))
	// Round half up: (2num + den) / 2den, floored.
	num := new(big.Int).Mul(v.Num(), big.NewInt(2))
	num.Add(num, v.Denom())
	n := num.Quo(num, new(big.Int).Mul(v.Denom(), big.NewInt(2)))
	if !n.IsInt64() {
		return 0, &sizeError{s, fmt.Sprintf("more than the largest size, %d bytes (8 EiB less one byte)", int64(math.MaxInt64))}
	}
	return n.Int64(), nil
}

// FormatSize formats a byte count for people, in binary units with three
// significant digits: "512 B", "4.00 KiB", "1.25 GiB", "80.0 GiB".
func FormatSize(n int64) string {
	neg := n < 0
	u := uint64(n)
	if neg {
		u = uint64(-n)
	}
	sign := ""
	if neg {
		sign = "-"
	}
	if u < 1024 {
		return fmt.Sprintf("%s%d B", sign, u)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(u) / 1024
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	var num string
	switch {
	case v >= 99.95:
		num = fmt.Sprintf("%.0f", v)
	case v >= 9.995:
		num = fmt.Sprintf("%.1f", v)
	default:
		num = fmt.Sprintf("%.2f", v)
	}
	if num == "1024" && i < len(units)-1 { // rounding carried into the next unit
		num, i = "1.00", i+1
	}
	return sign + num + " " + units[i]
}

// isDecimal reports whether s is digits with at most one decimal point.
func isDecimal(s string) bool {
	digits, dots := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}
