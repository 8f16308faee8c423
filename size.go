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
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseSize parses a byte count: plain bytes ("4096") or a number with a unit,
// binary (B, KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB), as in "80GiB",
// "2 MiB" or "1.5GB". The result must be a whole, non-negative number of bytes
// that fits in an int64.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if len(t) >= len(u.name) && strings.EqualFold(t[len(t)-len(u.name):], u.name) {
			mult = u.mult
			t = strings.TrimSpace(t[:len(t)-len(u.name)])
			break
		}
	}
	v, ok := new(big.Rat).SetString(t)
	if !ok || !isDecimal(t) {
		return 0, fmt.Errorf("bad size %q: want bytes or a number with a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	v.Mul(v, new(big.Rat).SetInt64(mult))
	if !v.IsInt() {
		return 0, fmt.Errorf("bad size %q: not a whole number of bytes", s)
	}
	n := v.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("bad size %q: larger than %d bytes", s, int64(math.MaxInt64))
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
