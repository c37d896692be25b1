// Package ui is ctsync's web dashboard: a few static files (HTML, its
// scripts and style sheet, and the vendored uPlot chart library under
// assets/vendor/uplot) embedded in the binary and served at /ui/. The
// page reads and changes everything through the /v1 API, so it shows what
// the API shows, works offline and needs no build step.
//
// Every value that comes from Consul or from the configuration is put in
// the page as text (textContent, createTextNode), never parsed as HTML;
// TestNoHTMLSinks keeps it that way, and a Content-Security-Policy that
// allows only the page's own script and style sheet is the second line of
// defence.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// Path is where the dashboard is served.
const Path = "/ui/"

// csp allows the page's own script, style sheet, icon and API calls, and
// nothing else: no inline script or style, no other origin, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard's files under Path (mount it at "/ui/").
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	files := http.FileServerFS(sub)
	return http.StripPrefix("/ui", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// A new ctsync version brings new files: revalidate every time.
		h.Set("Cache-Control", "no-cache")
		if task, id, ok := runLink(r.URL.EscapedPath()); ok {
			// A run's link (/ui/runs/<task>/<id>, pasted into an incident)
			// opens the dashboard's run page. The Location is relative,
			// so it works behind a proxy that serves ctsync under a prefix.
			h.Set("Location", "../../#/runs/"+task+"/"+id)
			w.WriteHeader(http.StatusFound)
			return
		}
		files.ServeHTTP(w, r)
	}))
}

// RunPath is the link of one run: RunPath + "<task>/<id>" (path-escaped).
const RunPath = Path + "runs/"

// runLink splits "/runs/<task>/<id>" (the path under /ui, escaped).
func runLink(escaped string) (task, id string, ok bool) {
	rest, ok := strings.CutPrefix(escaped, "/runs/")
	if !ok {
		return "", "", false
	}
	task, id, ok = strings.Cut(rest, "/")
	if !ok || task == "" || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return task, id, true
}

// RedirectHome sends "/" to the dashboard.
func RedirectHome() http.Handler {
	return http.RedirectHandler(Path, http.StatusFound)
}
