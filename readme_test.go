package gpualloc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpualloc/gpualloc/cli"
)

// The README is what a newcomer reads first; the reference is in docs/.
// These tests hold both to the code: the README's length, the links
// between the pages, the Go blocks (they compile, and the example strategy
// is docs/exactcache exactly, whose own test runs the conformance suite),
// and the command lines (every flag exists).

// readmeMaxLines is the most lines README.md may have.
const readmeMaxLines = 300

// A fence is a fenced code block of a page.
type fence struct {
	page string // the page's path, from the repository's root
	line int    // the line of its first line of code, from 1
	lang string // what follows the opening ```
	code string
}

func (f fence) String() string { return fmt.Sprintf("%s:%d", f.page, f.line) }

// pages returns README.md and docs/*.md.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("docs/ has no page")
	}
	return append([]string{"README.md"}, docs...)
}

// fences returns the fenced code blocks of the pages.
func fences(t *testing.T) []fence {
	t.Helper()
	var out []fence
	for _, page := range pages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		var cur *fence
		var code strings.Builder
		for i, line := range strings.Split(string(b), "\n") {
			switch {
			case cur == nil && strings.HasPrefix(line, "```"):
				cur = &fence{page: page, line: i + 2, lang: strings.TrimSpace(line[3:])}
				code.Reset()
			case cur != nil && strings.TrimSpace(line) == "```":
				cur.code = code.String()
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				code.WriteString(line + "\n")
			}
		}
		if cur != nil {
			t.Errorf("%s: a code block is never closed", cur)
		}
	}
	return out
}

func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move reference into docs/ and link it", n, readmeMaxLines)
	}
}

// TestDocsLinks checks that every relative link and image of the pages
// leads to a file or directory of the repository, and that a link to a
// heading of a page names one.
func TestDocsLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				u, err := url.Parse(m[1])
				if err != nil || u.Scheme != "" || u.Host != "" {
					continue // a URL, not a file of the repository
				}
				target := page
				if u.Path != "" {
					target = filepath.Join(filepath.Dir(page), u.Path)
					if _, err := os.Stat(target); err != nil {
						t.Errorf("%s:%d: link %s: %v", page, i+1, m[1], err)
						continue
					}
				}
				if u.Fragment != "" && strings.HasSuffix(target, ".md") && !hasAnchor(t, target, u.Fragment) {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", page, i+1, m[1], target, u.Fragment)
				}
			}
		}
	}
}

// hasAnchor reports whether the page has a heading whose anchor, as
// GitHub makes it, is anchor.
func hasAnchor(t *testing.T, page, anchor string) bool {
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var a strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				a.WriteRune(r)
			}
		}
		if a.String() == anchor {
			return true
		}
	}
	return false
}

// exampleDir holds the files of the example strategy that
// docs/write-a-strategy.md shows, each block starting with its name.
const exampleDir = "docs/exactcache"

// TestDocsExampleStrategy checks that docs/write-a-strategy.md shows the
// files of docs/exactcache exactly, every one of them; the package's own
// test runs the conformance suite on the strategy, and cli's
// TestThirdPartyModule builds the page's files as a module of their own.
func TestDocsExampleStrategy(t *testing.T) {
	shown := map[string]bool{}
	for _, f := range fences(t) {
		if f.page != "docs/write-a-strategy.md" || f.lang != "go" {
			continue
		}
		first, _, _ := strings.Cut(f.code, "\n")
		name, ok := strings.CutPrefix(first, "// ")
		if !ok || !strings.HasSuffix(name, ".go") {
			t.Errorf("%s: a Go block that does not start with its file's name (// NAME.go)", f)
			continue
		}
		want, err := os.ReadFile(filepath.Join(exampleDir, name))
		if err != nil {
			t.Errorf("%s: %s is not a file of %s: %v", f, name, exampleDir, err)
			continue
		}
		if f.code != string(want) {
			t.Errorf("%s: the block differs from %s/%s; copy the file into the page", f, exampleDir, name)
		}
		shown[name] = true
	}
	files, err := filepath.Glob(filepath.Join(exampleDir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if !shown[filepath.Base(file)] {
			t.Errorf("docs/write-a-strategy.md does not show %s", file)
		}
	}
	if len(shown) == 0 {
		t.Error("docs/write-a-strategy.md shows no Go file")
	}
}

// TestDocsGoBlocksCompile compiles every other Go block of the pages, each
// a program of its own (a block must be a whole file, its package clause
// and imports included), as packages of this module laid over it with go
// build -overlay: nothing is written into the repository.
func TestDocsGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the blocks: not in -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	where := map[string]fence{} // by the block's temporary file
	for _, f := range fences(t) {
		if f.lang != "go" || f.page == "docs/write-a-strategy.md" {
			continue
		}
		if !regexp.MustCompile(`(?m)^package \w+$`).MatchString(f.code) {
			t.Errorf("%s: a Go block that is no whole file: give it its package clause and imports, so that it compiles", f)
			continue
		}
		dir := fmt.Sprintf("block%d", len(pkgs))
		src := filepath.Join(tmp, strings.NewReplacer("/", "_", ".md", "").Replace(f.page)+fmt.Sprintf("-%d.go", f.line))
		if err := os.WriteFile(src, []byte(f.code), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(root, "internal", "docblocks", dir, "main.go")] = src
		pkgs = append(pkgs, "github.com/gpualloc/gpualloc/internal/docblocks/"+dir)
		where[src] = f
	}
	if len(pkgs) == 0 {
		t.Fatal("the pages have no Go block to compile")
	}
	b, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Several packages: go build compiles them and links nothing.
	cmd := exec.Command(gobin, append([]string{"build", "-overlay", ov}, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := string(out)
		for src, f := range where {
			msg = strings.ReplaceAll(msg, src, fmt.Sprintf("%s (block at line %d)", f.page, f.line))
		}
		t.Errorf("the pages' Go blocks do not compile: %v\n%s", err, msg)
	}
}

// TestDocsCommandLines parses every command line of the pages that runs
// simulate (go run ./cmd/simulate ..., simulate ..., and go run . ... of
// the example strategy's module) with --help added at its end: every flag
// it gives must exist for its command and take the value given, or
// simulate exits 2 with the flag named.
func TestDocsCommandLines(t *testing.T) {
	n := 0
	for _, f := range fences(t) {
		switch f.lang {
		case "", "sh", "bash", "shell", "console":
		default:
			continue
		}
		for _, cl := range commandLines(f) {
			args, ok := simulateArgs(cl.words)
			if !ok {
				continue
			}
			n++
			var stderr bytes.Buffer
			code := cli.Main(append(args, "--help"), io.Discard, &stderr)
			if code != 0 {
				t.Errorf("%s:%d: simulate %s: exit %d: %s", f.page, cl.line, strings.Join(args, " "), code, strings.TrimSpace(stderr.String()))
			}
		}
	}
	if n < 20 {
		t.Errorf("found %d command lines of simulate in the pages; the parser of code blocks lost them", n)
	}
}

// A commandLine is one shell command of a block, its continuation lines
// joined, split into words as the shell would (quotes removed, variables
// left as written).
type commandLine struct {
	line  int // its first line in the page
	words []string
}

// commandLines splits a shell block into commands: a line ending in \
// goes on the next; # starts a comment where a word could start.
func commandLines(f fence) []commandLine {
	var out []commandLine
	var cur commandLine
	var word strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			cur.words = append(cur.words, word.String())
			word.Reset()
			inWord = false
		}
	}
	for i, line := range strings.Split(f.code, "\n") {
		if len(cur.words) == 0 && !inWord {
			cur.line = f.line + i
		}
		line = strings.TrimPrefix(line, "$ ")
		cont := false
		rs := []rune(line)
		for j := 0; j < len(rs); j++ {
			r := rs[j]
			switch {
			case quote != 0:
				if r == quote {
					quote = 0
				} else {
					word.WriteRune(r)
				}
			case r == '\'' || r == '"':
				quote, inWord = r, true
			case r == '\\' && j == len(rs)-1:
				cont = true
			case r == '\\' && j+1 < len(rs):
				j++
				word.WriteRune(rs[j])
				inWord = true
			case r == ' ' || r == '\t':
				flush()
			case r == '#' && !inWord:
				j = len(rs)
			default:
				word.WriteRune(r)
				inWord = true
			}
		}
		if quote != 0 || cont {
			if quote != 0 {
				word.WriteRune('\n')
			}
			continue
		}
		flush()
		if len(cur.words) > 0 {
			out = append(out, cur)
		}
		cur = commandLine{}
	}
	return out
}

// simulateArgs returns the arguments of simulate in a command's words,
// past variables set for it: those after go run ./cmd/simulate, go run .,
// or simulate.
func simulateArgs(words []string) ([]string, bool) {
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
		words = words[1:]
	}
	switch {
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && (words[2] == "./cmd/simulate" || words[2] == "."):
		return words[3:], true
	case len(words) >= 1 && words[0] == "simulate":
		return words[1:], true
	}
	return nil, false
}

// TestCommandLinesParser checks the splitting of shell lines on the kinds
// of lines the pages hold.
func TestCommandLinesParser(t *testing.T) {
	f := fence{page: "x.md", line: 10, code: `go run ./cmd/simulate -s 'pytorch:a=64|256' my.csv   # comment
PYTORCH_CUDA_ALLOC_CONF='x:1,y:True|False' go run ./cmd/simulate -s pytorch my.csv
simulate --shard "${K}/16" -o "shards/${K}" \
  -s round:cutoff=20..34 traces/*.csv.gz
$ go run ./cmd/simulate tune dynamic
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
`}
	got := commandLines(f)
	want := []commandLine{
		{10, []string{"go", "run", "./cmd/simulate", "-s", "pytorch:a=64|256", "my.csv"}},
		{11, []string{"PYTORCH_CUDA_ALLOC_CONF=x:1,y:True|False", "go", "run", "./cmd/simulate", "-s", "pytorch", "my.csv"}},
		{12, []string{"simulate", "--shard", "${K}/16", "-o", "shards/${K}", "-s", "round:cutoff=20..34", "traces/*.csv.gz"}},
		{14, []string{"go", "run", "./cmd/simulate", "tune", "dynamic"}},
		{15, []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("commandLines:\n got %v\nwant %v", got, want)
	}
	if args, ok := simulateArgs(want[1].words); !ok || strings.Join(args, " ") != "-s pytorch my.csv" {
		t.Errorf("simulateArgs(%q) = %q, %v", want[1].words, args, ok)
	}
	if _, ok := simulateArgs(want[4].words); ok {
		t.Errorf("simulateArgs(%q): a variable alone is no command", want[4].words)
	}
}
