package tfc

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	tfe "github.com/hashicorp/go-tfe"
	"github.com/hashicorp/jsonapi"
)

// fakeTFE is an httptest server answering the TFE API endpoints the driver
// calls, with go-tfe's own types as the JSON:API documents. Runs move one
// step at every read (see fakeRun), so polling is exercised without time.
type fakeTFE struct {
	t     *testing.T
	srv   *httptest.Server
	token string
	org   string
	// relativeUpload: answer a host-relative upload-url, as OTF v0.1.0.
	relativeUpload bool
	// ignoreAutoApply: runs wait for a confirmation, as some servers.
	ignoreAutoApply bool
	// outcome is the final status of the next runs ("applied" unless
	// set): "errored" fails the plan with planError in its log.
	outcome   tfe.RunStatus
	planError string

	mu         sync.Mutex
	seq        int
	workspaces map[string]*tfe.Workspace // by name
	cvs        map[string]*tfe.ConfigurationVersion
	uploads    map[string]int // configuration version id -> bytes uploaded
	runs       map[string]*fakeRun
	order      []string                 // run ids, oldest first
	calls      map[string]int           // "METHOD pattern" -> requests
	fail       map[string][]int         // "METHOD pattern" -> status codes of the next requests
	tags       map[string][]string      // workspace id -> tags added
	hold       map[string]chan struct{} // run id -> closed when the run may finish applying
	holdNew    chan struct{}            // given to the runs created (holdRuns)
}

// fakeRun is a run and the statuses it still has to go through.
type fakeRun struct {
	run   *tfe.Run
	steps []tfe.RunStatus
	reads int
}

func newFakeTFE(t *testing.T) *fakeTFE {
	f := &fakeTFE{t: t, token: "good-token-4242", org: "acme", outcome: tfe.RunApplied,
		workspaces: map[string]*tfe.Workspace{}, cvs: map[string]*tfe.ConfigurationVersion{}, uploads: map[string]int{},
		runs: map[string]*fakeRun{}, calls: map[string]int{}, fail: map[string][]int{}, tags: map[string][]string{},
		hold: map[string]chan struct{}{}}
	mux := http.NewServeMux()
	api := func(pattern string, h func(w http.ResponseWriter, r *http.Request)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.calls[pattern]++
			var code int
			if q := f.fail[pattern]; len(q) > 0 {
				code, f.fail[pattern] = q[0], q[1:]
			}
			f.mu.Unlock()
			if code != 0 {
				writeErr(w, code)
				return
			}
			if !strings.HasPrefix(pattern, "PUT /upload/") && !strings.HasPrefix(pattern, "GET /logs/") &&
				r.Header.Get("Authorization") != "Bearer "+f.token {
				writeErr(w, http.StatusUnauthorized)
				return
			}
			h(w, r)
		})
	}
	api("GET /api/v2/ping", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("TFP-API-Version", "2.5")
		w.WriteHeader(http.StatusNoContent)
	})
	api("GET /api/v2/organizations/{org}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("org") != f.org {
			writeErr(w, http.StatusNotFound)
			return
		}
		f.write(w, http.StatusOK, &tfe.Organization{Name: f.org})
	})
	api("GET /api/v2/organizations/{org}/workspaces/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		ws := f.workspaces[r.PathValue("name")]
		f.mu.Unlock()
		if ws == nil || r.PathValue("org") != f.org {
			writeErr(w, http.StatusNotFound)
			return
		}
		f.write(w, http.StatusOK, ws)
	})
	api("POST /api/v2/organizations/{org}/workspaces", func(w http.ResponseWriter, r *http.Request) {
		a, _ := decodeBody(r)
		name, _ := a.Attributes["name"].(string)
		mode, _ := a.Attributes["execution-mode"].(string)
		f.mu.Lock()
		ws := &tfe.Workspace{ID: f.id("ws"), Name: name, ExecutionMode: mode, Organization: &tfe.Organization{Name: f.org}}
		f.workspaces[name] = ws
		f.mu.Unlock()
		f.write(w, http.StatusCreated, ws)
	})
	api("POST /api/v2/workspaces/{id}/relationships/tags", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Data []struct {
				Attributes struct{ Name string }
			}
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		for _, d := range body.Data {
			f.tags[r.PathValue("id")] = append(f.tags[r.PathValue("id")], d.Attributes.Name)
		}
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	api("POST /api/v2/workspaces/{id}/configuration-versions", func(w http.ResponseWriter, r *http.Request) {
		a, _ := decodeBody(r)
		spec, _ := a.Attributes["speculative"].(bool)
		f.mu.Lock()
		cv := &tfe.ConfigurationVersion{ID: f.id("cv"), Status: tfe.ConfigurationPending, Speculative: spec}
		cv.UploadURL = "/upload/" + cv.ID
		if !f.relativeUpload {
			cv.UploadURL = f.srv.URL + cv.UploadURL
		}
		f.cvs[cv.ID] = cv
		f.mu.Unlock()
		f.write(w, http.StatusCreated, cv)
	})
	api("GET /api/v2/workspaces/{id}/configuration-versions", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		var list []any
		for i := len(f.order) - 1; i >= 0; i-- { // newest first: by the runs that used them
			if cv := f.cvs[f.runs[f.order[i]].run.ConfigurationVersion.ID]; cv != nil {
				list = append(list, cv)
			}
		}
		f.mu.Unlock()
		f.write(w, http.StatusOK, list)
	})
	api("PUT /upload/{id}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		defer f.mu.Unlock()
		cv := f.cvs[r.PathValue("id")]
		if cv == nil || len(b) == 0 {
			writeErr(w, http.StatusBadRequest)
			return
		}
		f.uploads[cv.ID] = len(b)
		cv.Status = tfe.ConfigurationUploaded
		w.WriteHeader(http.StatusOK)
	})
	api("GET /api/v2/configuration-versions/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		cv := f.cvs[r.PathValue("id")]
		f.mu.Unlock()
		if cv == nil {
			writeErr(w, http.StatusNotFound)
			return
		}
		f.write(w, http.StatusOK, cv)
	})
	api("POST /api/v2/runs", func(w http.ResponseWriter, r *http.Request) {
		a, _ := decodeBody(r)
		f.mu.Lock()
		id := f.id("run")
		run := &tfe.Run{ID: id, Status: tfe.RunPending, Actions: &tfe.RunActions{},
			ConfigurationVersion: &tfe.ConfigurationVersion{ID: a.rel("configuration-version")},
			Workspace:            &tfe.Workspace{ID: a.rel("workspace")},
			Plan:                 &tfe.Plan{ID: "plan-" + id}, Apply: &tfe.Apply{ID: "apply-" + id}}
		run.Message, _ = a.Attributes["message"].(string)
		run.IsDestroy, _ = a.Attributes["is-destroy"].(bool)
		run.PlanOnly, _ = a.Attributes["plan-only"].(bool)
		auto, _ := a.Attributes["auto-apply"].(bool)
		fr := &fakeRun{run: run}
		switch {
		case f.outcome == tfe.RunErrored:
			fr.steps = []tfe.RunStatus{tfe.RunPlanning, tfe.RunErrored}
		case run.PlanOnly:
			fr.steps = []tfe.RunStatus{tfe.RunPlanning, tfe.RunPlannedAndFinished}
		case auto && !f.ignoreAutoApply:
			fr.steps = []tfe.RunStatus{tfe.RunPlanning, tfe.RunApplying, tfe.RunApplied}
		default: // waits in planned until confirmed
			fr.steps = []tfe.RunStatus{tfe.RunPlanning, tfe.RunPlanned}
		}
		f.runs[id] = fr
		f.order = append(f.order, id)
		if f.holdNew != nil {
			f.hold[id] = f.holdNew
		}
		f.mu.Unlock()
		f.write(w, http.StatusCreated, run)
	})
	api("GET /api/v2/workspaces/{id}/runs", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		var list []any
		for i := len(f.order) - 1; i >= 0; i-- {
			list = append(list, f.runs[f.order[i]].run)
		}
		f.mu.Unlock()
		f.write(w, http.StatusOK, list)
	})
	api("GET /api/v2/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		fr := f.runs[r.PathValue("id")]
		if fr == nil {
			f.mu.Unlock()
			writeErr(w, http.StatusNotFound)
			return
		}
		fr.reads++
		f.advance(fr)
		run := *fr.run
		f.mu.Unlock()
		f.write(w, http.StatusOK, &run)
	})
	api("POST /api/v2/runs/{id}/actions/apply", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fr := f.runs[r.PathValue("id")]
		if fr == nil || fr.run.Status != tfe.RunPlanned {
			writeErr(w, http.StatusConflict)
			return
		}
		fr.steps = []tfe.RunStatus{tfe.RunApplying, tfe.RunApplied}
		fr.run.Actions.IsConfirmable = false
		w.WriteHeader(http.StatusAccepted)
	})
	api("POST /api/v2/runs/{id}/actions/discard", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fr := f.runs[r.PathValue("id")]
		if fr == nil {
			writeErr(w, http.StatusNotFound)
			return
		}
		fr.run.Status, fr.steps = tfe.RunDiscarded, nil
		fr.run.Actions.IsConfirmable = false
		w.WriteHeader(http.StatusAccepted)
	})
	api("GET /api/v2/plans/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.write(w, http.StatusOK, &tfe.Plan{ID: id, Status: tfe.PlanFinished, HasChanges: true, ResourceAdditions: 1,
			LogReadURL: f.srv.URL + "/logs/" + id})
	})
	api("GET /api/v2/applies/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.write(w, http.StatusOK, &tfe.Apply{ID: id, Status: tfe.ApplyFinished, ResourceAdditions: 1,
			LogReadURL: f.srv.URL + "/logs/" + id})
	})
	api("GET /logs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		text := "Terraform will perform the following actions:\n  # terraform_data.ids will be created\nPlan: 1 to add, 0 to change, 0 to destroy.\n"
		if strings.HasPrefix(id, "apply-") {
			text = "terraform_data.ids: Creating...\nApply complete! Resources: 1 added, 0 changed, 0 destroyed.\n"
		} else if f.planError != "" {
			text = "Error: " + f.planError + "\n\nThe module says no.\n"
		}
		full := "\x02" + text + "\x03"
		off, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		if off > len(full) {
			off = len(full)
		}
		end := len(full)
		if limit > 0 && off+limit < end {
			end = off + limit
		}
		_, _ = io.WriteString(w, full[off:end])
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("fake TFE: unexpected request %s %s", r.Method, r.URL.Path)
		writeErr(w, http.StatusNotFound)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// advance moves a run one status on at each read; a held run stays in
// applying until released. f.mu is held.
func (f *fakeTFE) advance(fr *fakeRun) {
	if len(fr.steps) == 0 {
		return
	}
	next := fr.steps[0]
	if ch := f.hold[fr.run.ID]; ch != nil && next == tfe.RunApplied {
		select {
		case <-ch:
		default:
			return
		}
	}
	fr.run.Status, fr.steps = next, fr.steps[1:]
	fr.run.Actions.IsConfirmable = next == tfe.RunPlanned
	fr.run.HasChanges = true
}

// holdRuns keeps the runs created from now on in applying until the
// returned func is called.
func (f *fakeTFE) holdRuns() func() {
	ch := make(chan struct{})
	f.mu.Lock()
	f.holdNew = ch
	f.mu.Unlock()
	return func() { close(ch) }
}

func (f *fakeTFE) id(kind string) string {
	f.seq++
	return fmt.Sprintf("%s-%d", kind, f.seq)
}

func (f *fakeTFE) count(pattern string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[pattern]
}

func (f *fakeTFE) failNext(pattern string, codes ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[pattern] = append(f.fail[pattern], codes...)
}

func (f *fakeTFE) runIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.order...)
}

func (f *fakeTFE) status(id string) (tfe.RunStatus, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[id].run.Status, f.runs[id].reads
}

// addPlannedRun adds a run that waits for a confirmation.
func (f *fakeTFE) addPlannedRun() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.id("run")
	f.runs[id] = &fakeRun{run: &tfe.Run{ID: id, Status: tfe.RunPlanned, Actions: &tfe.RunActions{IsConfirmable: true},
		ConfigurationVersion: &tfe.ConfigurationVersion{ID: "cv-0"}, Plan: &tfe.Plan{ID: "plan-" + id}, Apply: &tfe.Apply{ID: "apply-" + id}}}
	f.order = append(f.order, id)
	return id
}

func (f *fakeTFE) addWorkspace(name, mode string) *tfe.Workspace {
	f.mu.Lock()
	defer f.mu.Unlock()
	ws := &tfe.Workspace{ID: f.id("ws"), Name: name, ExecutionMode: mode, Organization: &tfe.Organization{Name: f.org}}
	f.workspaces[name] = ws
	return ws
}

func (f *fakeTFE) write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/vnd.api+json")
	w.WriteHeader(code)
	var err error
	if list, ok := v.([]any); ok {
		if list == nil {
			_, err = io.WriteString(w, `{"data":[]}`)
		} else {
			err = jsonapi.MarshalPayload(w, list)
		}
	} else {
		err = jsonapi.MarshalPayload(w, v)
	}
	if err != nil {
		f.t.Errorf("fake TFE: marshal %T: %v", v, err)
	}
}

func writeErr(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "application/vnd.api+json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"errors":[{"status":"%d","title":%q}]}`, code, http.StatusText(code))
}

// jsonapiBody is a request document: attributes and relationship ids.
type jsonapiBody struct {
	Attributes    map[string]any
	Relationships map[string]struct {
		Data struct{ ID string }
	}
}

func (b jsonapiBody) rel(name string) string { return b.Relationships[name].Data.ID }

func decodeBody(r *http.Request) (jsonapiBody, error) {
	var doc struct{ Data jsonapiBody }
	err := json.NewDecoder(r.Body).Decode(&doc)
	return doc.Data, err
}
