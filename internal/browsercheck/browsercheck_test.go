package browsercheck

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writePage writes html as index.html in a new directory, beside a 4×4
// PNG named fig.png, and returns the page's path.
func writePage(t *testing.T, html string) string {
	t.Helper()
	dir := t.TempDir()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fig.png"), b.Bytes(), 0o644))
	path := filepath.Join(dir, "index.html")
	require.NoError(t, os.WriteFile(path, []byte("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>t</title></head><body>"+html+"</body></html>"), 0o644))
	return path
}

func browser(t *testing.T) string {
	exe := Find()
	if exe == "" {
		t.Skip("no headless browser on PATH")
	}
	return exe
}

func TestGoodPage(t *testing.T) {
	path := writePage(t, `<p>fine</p><img src="fig.png" alt="a figure"><script>console.log("not an error")</script>`)
	Page(t, path)
}

// TestProblems holds each kind of problem to a page that has it alone,
// so that a check that stopped seeing one fails here.
func TestProblems(t *testing.T) {
	exe := browser(t)
	cases := []struct {
		name, html, want string
	}{
		{"missing image", `<img src="nothere.png">`, "image nothere.png did not load"},
		{"undecodable image", `<img src="index.html">`, "image index.html did not load"},
		{"console error", `<script>console.error("bad", 42)</script>`, "console error: bad 42"},
		{"exception", `<script>null.boom</script>`, "uncaught exception"},
		{"missing script", `<script src="nothere.js"></script>`, "nothere.js"},
		{"missing stylesheet", `<link rel="stylesheet" href="nothere.css">`, "nothere.css"},
		{"late error", `<script>addEventListener("load", () => setTimeout(() => console.error("late")))</script>`, "console error: late"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			problems, err := check(context.Background(), exe, writePage(t, c.html), t.TempDir())
			require.NoError(t, err)
			require.NotEmpty(t, problems)
			require.Contains(t, strings.Join(problems, "\n"), c.want)
		})
	}
}

func TestMissingPage(t *testing.T) {
	exe := browser(t)
	_, err := check(context.Background(), exe, filepath.Join(t.TempDir(), "absent.html"), t.TempDir())
	require.Error(t, err)
}
