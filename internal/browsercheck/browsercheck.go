// Package browsercheck opens a page the project writes (an index.html with
// its figures) in a real headless browser and holds it to what a reader
// needs: the page loads, every image on it loaded, and the browser reported
// no console error, uncaught exception or failed resource.
//
// It drives Chromium or Chrome through the DevTools protocol
// (github.com/chromedp/chromedp), so that the console and the network are
// the browser's own account, not a script's guess. A test on a machine
// without such a browser is skipped, not failed; CI installs one.
package browsercheck

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Browsers are the executables Page looks for on PATH, in this order.
var Browsers = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Timeout bounds one check: starting the browser, loading the page and
// reading it back.
const Timeout = 2 * time.Minute

// Page opens the HTML file at path in a headless browser and fails t with
// every problem found: the page did not load, an <img> did not load (its
// naturalWidth is 0), the page logged a console error or threw, or a
// resource failed to load. It skips t when none of Browsers is on PATH.
// Each call starts a browser of its own with a fresh profile, about a
// second on a warm machine.
func Page(t testing.TB, path string) {
	t.Helper()
	exe := Find()
	if exe == "" {
		t.Skipf("no headless browser to check %s: none of %s is on PATH", path, strings.Join(Browsers, ", "))
	}
	problems, err := check(context.Background(), exe, path, t.TempDir())
	if err != nil {
		t.Fatalf("%s in %s: %v", path, exe, err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", path, p)
	}
}

// Find returns the path of the first of Browsers on PATH, or "".
func Find() string {
	for _, name := range Browsers {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// pageState is what the page says of itself once loaded.
type pageState struct {
	ReadyState string   `json:"readyState"`
	Images     int      `json:"images"`
	Broken     []string `json:"broken"`
}

// stateJS reads the page's state; an image counts as broken when it has
// not completed or completed with no pixels, as a missing or undecodable
// file leaves it.
const stateJS = `(() => {
  const imgs = Array.from(document.images);
  return {
    readyState: document.readyState,
    images: imgs.length,
    broken: imgs.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute("src") || "(no src)"),
  };
})()`

// check loads path in the browser exe, with its profile in profile, and
// returns the problems found, or an error when the page could not be
// checked at all (the browser would not start, the file would not load).
func check(ctx context.Context, exe, path, profile string) ([]string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(profile),
		chromedp.NoSandbox, // CI runs as root, where the sandbox will not start
		chromedp.DisableGPU,
	)
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	// Open the tab first, so that the listener sees every event of the load.
	if err := chromedp.Do(bctx); err != nil {
		return nil, fmt.Errorf("starting the browser: %w", err)
	}
	var (
		mu       sync.Mutex
		problems []string
	)
	add := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// The listener runs in the loop that reads the tab's messages, and an
	// event arrives before the reply to the command that caused it, so
	// every event of the load has been seen when the last command returns.
	err = chromedp.Listen(bctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				add("console %s: %s", ev.Type, consoleText(ev.Args))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg = d.Exception.Description
			}
			add("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, msg)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				add("browser log error (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		case *network.EventLoadingFailed:
			if !ev.Canceled {
				add("resource failed to load (%s): %s", ev.Type, ev.ErrorText)
			}
		}
	})
	if err != nil {
		return nil, err
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(u.String())); err != nil {
		return nil, err
	}
	st, err := chromedp.Run(bctx, chromedp.Evaluate[pageState](stateJS))
	if err != nil {
		return nil, err
	}
	// One frame and a task later, so that what the page does right after
	// its load event has happened too.
	err = chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](
		`new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)))`, chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, err
	}
	if st.ReadyState != "complete" {
		add("the page did not finish loading: document.readyState is %q", st.ReadyState)
	}
	for _, src := range st.Broken {
		add("image %s did not load", src)
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]string(nil), problems...), nil
}

// consoleText joins a console call's arguments as the console shows them.
func consoleText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		switch {
		case a.Description != "":
			parts = append(parts, a.Description)
		case len(a.Value) > 0:
			parts = append(parts, strings.Trim(string(a.Value), `"`))
		default:
			parts = append(parts, string(a.Type))
		}
	}
	return strings.Join(parts, " ")
}
