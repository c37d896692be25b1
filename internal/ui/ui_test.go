package ui

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestHandler(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(Path, Handler())
	mux.Handle("GET /{$}", RedirectHome())
	for path, ctype := range map[string]string{
		"/ui/":                               "text/html; charset=utf-8",
		"/ui/app.js":                         "text/javascript; charset=utf-8",
		"/ui/style.css":                      "text/css; charset=utf-8",
		"/ui/favicon.svg":                    "image/svg+xml",
		"/ui/charts.js":                      "text/javascript; charset=utf-8",
		"/ui/vendor/uplot/uPlot.iife.min.js": "text/javascript; charset=utf-8",
		"/ui/vendor/uplot/uPlot.min.css":     "text/css; charset=utf-8",
	} {
		resp := get(t, mux, "GET", path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || len(body) == 0 {
			t.Errorf("%s: status %d, %d bytes", path, resp.StatusCode, len(body))
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != ctype {
			t.Errorf("%s: Content-Type %q, want %q", path, got, ctype)
		}
		for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options", "Cache-Control"} {
			if resp.Header.Get(h) == "" {
				t.Errorf("%s: no %s header", path, h)
			}
		}
	}
	if resp := get(t, mux, "GET", "/ui/nope.js"); resp.StatusCode != 404 {
		t.Errorf("unknown file: %d", resp.StatusCode)
	}
	if resp := get(t, mux, "POST", "/ui/"); resp.StatusCode != 405 {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	if resp := get(t, mux, "GET", "/ui"); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("/ui: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := get(t, mux, "GET", "/"); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("/: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for path, want := range map[string]string{
		"/ui/runs/web/3f2a":     "../../#/runs/web/3f2a",
		"/ui/runs/a%2Fb/x%20y":  "../../#/runs/a%2Fb/x%20y",
		"/ui/runs/web/3f2a?x=1": "../../#/runs/web/3f2a",
	} {
		resp := get(t, mux, "GET", path)
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != want {
			t.Errorf("%s: %d %q, want a redirect to %q", path, resp.StatusCode, resp.Header.Get("Location"), want)
		}
	}
	for _, path := range []string{"/ui/runs/", "/ui/runs/web", "/ui/runs/web/", "/ui/runs/web/a/b"} {
		if resp := get(t, mux, "GET", path); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", path, resp.StatusCode)
		}
	}
	if resp := get(t, mux, "GET", "/other"); resp.StatusCode != 404 {
		t.Errorf("/other: %d", resp.StatusCode)
	}
}

// TestNoHTMLSinks keeps the dashboard free of the DOM APIs that parse
// strings as HTML or code: every value is set as text.
func TestNoHTMLSinks(t *testing.T) {
	sinks := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|` +
		`setTimeout\(\s*['"]|setInterval\(\s*['"]|\.srcdoc|createContextualFragment|DOMParser|javascript:`)
	err := fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			if m := sinks.FindString(line); m != "" {
				t.Errorf("%s:%d uses %s: set values with textContent / el() instead", path, i+1, m)
			}
		}
		// No external resources: the dashboard works offline.
		if ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(string(b)); ext != "" {
			t.Errorf("%s loads an external resource: %s", path, ext)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
