package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
)

// newFlagSet returns a flag set whose -h prints usage, followed by the
// flags, on standard output.
func newFlagSet(e *env, name, usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprint(e.stdout, usage)
		fmt.Fprint(e.stdout, fs.FlagUsages())
	}
	return fs
}

// addTempDir adds --temp-dir, the directory of a long snapshot read's
// temporary file, which sets e.tempDir.
func addTempDir(fs *pflag.FlagSet, e *env) { addTempDirFor(fs, e, "") }

// addTempDirFor is addTempDir for a command that writes more there: what
// it writes, said after the snapshot's entries.
func addTempDirFor(fs *pflag.FlagSet, e *env, more string) {
	fs.StringVar(&e.tempDir, "temp-dir", "", "`DIR` for temporary files: a PyTorch snapshot's entries past the first 256 MiB of them, read back as needed (about 66 bytes of disk an entry)"+more+" (default: $TMPDIR, else /tmp)")
}

// optionalValues are the values of the flags whose value may be left out
// ("--log-y" alone), which the flag takes when they follow it after a
// space ("--log-y on"), as the help writes every other flag.
var optionalValues = map[string][]string{"log-y": {"auto", "on", "off"}}

// parseFlags parses args; -h prints the usage (pflag calls fs.Usage) and
// gives errHelp, a bad flag gives a usage error.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	args, err := joinOptionalValues(fs, args)
	if err != nil {
		return err
	}
	err = fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return errHelp
	}
	if err != nil {
		return usagef("%s", flagError(fs, err))
	}
	return nil
}

// badValue matches pflag's error for a value that its flag cannot parse:
// `invalid argument "abc" for "-j, --jobs" flag: strconv.ParseInt: ...`.
var badValue = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-., )?--([^"]+)" flag: (.*)$`)

// flagError rewrites pflag's error for a value its flag cannot parse as
// "--FLAG VALUE: want ...", in the words of the help rather than Go's
// strconv and time packages; other errors stay as they are.
func flagError(fs *pflag.FlagSet, err error) string {
	m := badValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	v, name, why := m[1], m[2], m[3]
	f := fs.Lookup(name)
	if f == nil {
		return err.Error()
	}
	var want string
	switch f.Value.Type() {
	case "int", "int64":
		want = "a whole number"
		if strings.Contains(why, "out of range") {
			want = fmt.Sprintf("a whole number, at most %d", math.MaxInt64)
		}
	case "uint64":
		want = "a whole number, 0 or more"
		if strings.Contains(why, "out of range") {
			want = fmt.Sprintf("a whole number, at most %d", uint64(math.MaxUint64))
		}
	case "float64":
		want = "a number"
	case "bool":
		want = "true or false"
	case "duration":
		want = "a duration with a unit, such as 10s, 1m30s or 2h"
	default:
		return err.Error()
	}
	return fmt.Sprintf("--%s %q: want %s", name, v, want)
}

// parseSizeFlag parses the size that flag gives ("--capacity"), which must
// be above 0; a bad one is a usage error that says what is wrong.
func parseSizeFlag(flag, s string) (int64, error) {
	n, err := gpualloc.ParseSize(s)
	switch {
	case err != nil:
		// ParseSize's error reads `bad size "X": why`: the flag's name
		// takes the place of "bad size".
		return 0, usagef("%s %s", flag, strings.TrimPrefix(err.Error(), "bad size "))
	case n == 0:
		return 0, usagef("%s %q: want a size above 0, such as 80GiB", flag, s)
	}
	return n, nil
}

// joinOptionalValues returns args with "--FLAG VALUE" written
// "--FLAG=VALUE" for each flag of fs whose value may be left out and a
// VALUE it takes: pflag reads a flag with an optional value only in the
// second form, and would take VALUE for an argument. The values of --log-y
// are auto, on and off; those of a boolean flag (--lenient, --force...)
// what strconv.ParseBool reads, when no file has that name.
//
// A word that follows such a flag, takes no value of it, and names no
// file and no bundled trace ("--log-y maybe", "--lenient yes") is bad
// usage that names the flag: taken for an argument, it would fail as a
// missing file, far from the flag that the user meant it for.
func joinOptionalValues(fs *pflag.FlagSet, args []string) ([]string, error) {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...), nil
		}
		name, ok := strings.CutPrefix(a, "--")
		f := fs.Lookup(name)
		if !ok || f == nil || f.NoOptDefVal == "" || i+1 == len(args) {
			out = append(out, a)
			continue
		}
		v := args[i+1]
		_, fileErr := os.Lstat(v)
		isBool := f.Value.Type() == "bool"
		_, boolErr := strconv.ParseBool(v)
		switch {
		case slices.Contains(optionalValues[name], v), isBool && boolErr == nil && fileErr != nil:
			out = append(out, a+"="+v)
			i++
			continue
		case fileErr == nil, v == "-", strings.HasPrefix(v, "-"), strings.ContainsAny(v, `/\.`):
		case isBool:
			if _, bundled := traces.LookupBundled(v); !bundled {
				return nil, usagef("%s %s: the flag takes no value: write %s alone for true, or %s=false (and %s is no file)", a, v, a, a, v)
			}
		default:
			if _, bundled := traces.LookupBundled(v); !bundled {
				return nil, usagef("%s %s: want %s (%s alone is %s; and %s is no file)", a, v, orList(optionalValues[name]), a, f.NoOptDefVal, v)
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// orList writes words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
