package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/ctsync/ctsync/internal/gate/gatetest"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

const specPath = "../../docs/api/openapi.yaml"

var (
	specOnce sync.Once
	specDoc  *openapi3.T
	specErr  error

	// covered records "METHOD /path STATUS" of every checked response.
	coveredMu sync.Mutex
	covered   = map[string]bool{}
)

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		specDoc, specErr = loader.LoadFromFile(specPath)
		if specErr == nil {
			specErr = specDoc.Validate(context.Background())
		}
	})
	if specErr != nil {
		t.Fatalf("docs/api/openapi.yaml: %v", specErr)
	}
	return specDoc
}

// matchPath finds the spec path template matching a request path and the
// values of its parameters.
func matchPath(doc *openapi3.T, path string) (string, map[string]string) {
	segs := strings.Split(path, "/")
	for tmpl := range doc.Paths.Map() {
		tsegs := strings.Split(tmpl, "/")
		if len(tsegs) != len(segs) {
			continue
		}
		params := map[string]string{}
		ok := true
		for i, ts := range tsegs {
			if strings.HasPrefix(ts, "{") && strings.HasSuffix(ts, "}") && segs[i] != "" {
				params[ts[1:len(ts)-1]] = segs[i]
				continue
			}
			if ts != segs[i] {
				ok = false
				break
			}
		}
		if ok {
			return tmpl, params
		}
	}
	return "", nil
}

// checkSpec validates a live response against the OpenAPI document. A
// response to a path and method the spec does not describe (405, unknown
// path) must be the JSON error body.
func checkSpec(t *testing.T, req *http.Request, r response) {
	t.Helper()
	doc := loadSpec(t)
	if r.header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s: no X-Request-Id header", req.Method, req.URL.Path)
	}
	tmpl, params := matchPath(doc, req.URL.Path)
	var op *openapi3.Operation
	if tmpl != "" {
		op = doc.Paths.Value(tmpl).GetOperation(req.Method)
	}
	if op == nil {
		if req.Method == http.MethodOptions {
			return
		}
		if r.status < 400 {
			t.Errorf("%s %s: status %d from a route the spec does not describe", req.Method, req.URL.Path, r.status)
			return
		}
		schema := doc.Components.Schemas["Error"].Value
		var v any
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Errorf("%s %s: error body is not JSON: %s", req.Method, req.URL.Path, r.body)
			return
		}
		if err := schema.VisitJSON(v); err != nil {
			t.Errorf("%s %s: error body does not match the Error schema: %v", req.Method, req.URL.Path, err)
		}
		return
	}
	route := &routers.Route{Spec: doc, Path: tmpl, PathItem: doc.Paths.Value(tmpl), Method: req.Method, Operation: op}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
		},
		Status:  r.status,
		Header:  r.header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(r.body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s -> %d does not match docs/api/openapi.yaml: %v\nbody: %s",
			req.Method, req.URL.String(), r.status, err, bytes.TrimSpace(r.body))
	}
	coveredMu.Lock()
	covered[req.Method+" "+tmpl+" "+http.StatusText(r.status)] = true
	covered[req.Method+" "+tmpl] = true
	coveredMu.Unlock()
}

// specRoutes lists "METHOD /path" of every operation in the spec.
func specRoutes(doc *openapi3.T) []string {
	var out []string
	for p, item := range doc.Paths.Map() {
		for m := range item.Operations() {
			out = append(out, m+" "+p)
		}
	}
	sort.Strings(out)
	return out
}

// TestRoutesMatchSpec checks that every route of the mux is in the spec and
// every operation of the spec is a route.
func TestRoutesMatchSpec(t *testing.T) {
	doc := loadSpec(t)
	var mux []string
	s := &Server{}
	for _, rt := range s.routeTable() {
		mux = append(mux, rt.method+" "+rt.path)
	}
	sort.Strings(mux)
	spec := specRoutes(doc)
	for _, r := range mux {
		if !slices.Contains(spec, r) {
			t.Errorf("route %s is not in docs/api/openapi.yaml", r)
		}
	}
	for _, r := range spec {
		if !slices.Contains(mux, r) {
			t.Errorf("docs/api/openapi.yaml describes %s, which the server does not serve", r)
		}
	}
}

// TestEveryOperationLive calls every operation of the spec with its main
// success and failure statuses against a real controller; every response is
// validated by checkSpec. It then checks that each (operation, status) in
// the list below was seen.
func TestEveryOperationLive(t *testing.T) {
	fa := gatetest.New()
	h := newHarness(t, []task.Spec{servicesTask("web-task", "web")}, withApprovals(fa))
	h.w.Set(healthKey("web"), instances("web-1"))
	h.waitChan(h.applied, "web-task")
	h.waitIdle("web-task")

	h.do("GET", "/v1/health", "").expect(t, 200)
	h.do("GET", "/v1/status", "").expect(t, 200)
	h.do("GET", "/v1/status/tasks?include=events", "").expect(t, 200)
	h.do("GET", "/v1/status/tasks?include=nope", "").expect(t, 400)
	h.do("GET", "/v1/status/tasks/web-task?include=events&status=SUCCESSFUL", "").expect(t, 200)
	h.do("GET", "/v1/status/tasks/nope", "").expect(t, 404)
	h.do("GET", "/v1/status/tasks/web-task?status=bad", "").expect(t, 400)
	h.do("GET", "/v1/status/cluster", "").expect(t, 405)
	h.do("GET", "/v1/tasks", "").expect(t, 200)
	h.do("GET", "/v1/tasks/web-task", "").expect(t, 200)
	h.do("GET", "/v1/tasks/nope", "").expect(t, 404)

	body := `{"task":{"name":"api-task","module":"org/mod/x","condition":{"services":{"names":["web"]}}}}`
	h.do("POST", "/v1/tasks?run=inspect", body).expect(t, 200)
	h.do("POST", "/v1/tasks?run=now", body).expect(t, 201)
	h.do("POST", "/v1/tasks", body).expect(t, 400)
	h.do("POST", "/v1/tasks", `{"task":{`+strings.Repeat(" ", MaxBodyBytes)+`}}`).expect(t, 413)
	h.setFailing("failing", true)
	h.do("POST", "/v1/tasks?run=now", `{"task":{"name":"failing","module":"m","condition":{"services":{"names":["web"]}}}}`).expect(t, 500)

	h.do("PATCH", "/v1/tasks/api-task?run=inspect", `{"enabled":true}`).expect(t, 200)
	h.do("PATCH", "/v1/tasks/api-task", `{"enabled":false}`).expect(t, 200)
	h.do("PATCH", "/v1/tasks/api-task?run=now", `{"enabled":true}`).expect(t, 200)
	h.do("PATCH", "/v1/tasks/api-task", `{"enabled":1}`).expect(t, 400)
	h.do("PATCH", "/v1/tasks/nope", `{"enabled":true}`).expect(t, 404)
	h.do("PATCH", "/v1/tasks/nope", `{"enabled":true,`+strings.Repeat(" ", MaxBodyBytes)+`}`).expect(t, 413)

	h.do("POST", "/v1/tasks/api-task/run", "").expect(t, 200)
	h.do("POST", "/v1/tasks/nope/run", "").expect(t, 404)
	h.do("GET", "/v1/tasks/api-task/events", "").expect(t, 200)
	h.do("GET", "/v1/tasks/nope/events", "").expect(t, 404)

	// 409 and 500 from a gated, then failing, run.
	release := h.gate("web-task")
	h.w.Set(healthKey("web"), instances("web-1", "web-2"))
	h.waitChan(h.started, "web-task")
	h.do("PATCH", "/v1/tasks/web-task", `{"enabled":false}`).expect(t, 409)
	h.do("POST", "/v1/tasks/web-task/run", "").expect(t, 409)
	release()
	drain(h.applied)
	h.waitIdle("web-task")
	h.setFailing("web-task", true)
	h.do("POST", "/v1/tasks/web-task/run", "").expect(t, 500)
	h.setFailing("web-task", false)

	_ = h.st.AddEvent(context.Background(), store.Event{ID: "with-log", TaskName: "web-task", Success: true, Kind: store.KindApply,
		LogPath: writeLog(t, "terraform output\n")})
	h.do("GET", "/v1/tasks/web-task/events/with-log/log", "").expect(t, 200)
	h.do("GET", "/v1/tasks/web-task/events/nope/log", "").expect(t, 404)
	h.do("GET", "/v1/tasks/web-task/events/with-log", "").expect(t, 200)
	h.do("GET", "/v1/tasks/web-task/events/nope", "").expect(t, 404)
	h.do("GET", "/v1/tasks/web-task/events?result=failure&limit=1&offset=0", "").expect(t, 200)
	h.do("GET", "/v1/tasks/web-task/events?result=maybe", "").expect(t, 400)
	h.do("GET", "/v1/tasks/web-task/events?limit=0", "").expect(t, 400)
	h.do("GET", "/v1/status/runs", "").expect(t, 200)
	h.do("GET", "/v1/status/runs?task=web-task&since=2020-01-01T00:00:00Z", "").expect(t, 200)
	h.do("GET", "/v1/status/runs?since=yesterday", "").expect(t, 400)
	h.do("GET", "/v1/status/runs?task=nope", "").expect(t, 404)

	h.do("GET", "/v1/tasks/web-task/plan", "").expect(t, 404)
	p := fa.Hold(heldPlan("web-task"))
	h.do("GET", "/v1/status/tasks/web-task", "").expect(t, 200)
	h.do("GET", "/v1/tasks/web-task/plan", "").expect(t, 200)
	h.do("POST", "/v1/tasks/web-task/plan/nope/approve", "").expect(t, 409)
	h.do("POST", "/v1/tasks/nope/plan/x/approve", "").expect(t, 404)
	h.do("POST", "/v1/tasks/web-task/plan/"+p.ID+"/approve", "").expect(t, 200)
	h.do("POST", "/v1/tasks/web-task/plan/"+p.ID+"/reject", "").expect(t, 409)
	h.do("POST", "/v1/tasks/nope/plan/x/reject", "").expect(t, 404)
	p = fa.Hold(heldPlan("web-task"))
	h.do("POST", "/v1/tasks/web-task/plan/"+p.ID+"/reject", "").expect(t, 200)

	h.do("DELETE", "/v1/tasks/api-task?destroy=maybe", "").expect(t, 400)
	h.do("DELETE", "/v1/tasks/api-task", "").expect(t, 202)
	h.do("DELETE", "/v1/tasks/api-task", "").expect(t, 404)

	want := []string{
		"GET /v1/health OK",
		"GET /v1/status OK",
		"GET /v1/status/tasks OK", "GET /v1/status/tasks Bad Request",
		"GET /v1/status/tasks/{name} OK", "GET /v1/status/tasks/{name} Not Found", "GET /v1/status/tasks/{name} Bad Request",
		"GET /v1/status/cluster Method Not Allowed",
		"GET /v1/tasks OK",
		"POST /v1/tasks OK", "POST /v1/tasks Created", "POST /v1/tasks Bad Request",
		"POST /v1/tasks Request Entity Too Large", "POST /v1/tasks Internal Server Error",
		"GET /v1/tasks/{name} OK", "GET /v1/tasks/{name} Not Found",
		"PATCH /v1/tasks/{name} OK", "PATCH /v1/tasks/{name} Bad Request", "PATCH /v1/tasks/{name} Not Found",
		"PATCH /v1/tasks/{name} Conflict", "PATCH /v1/tasks/{name} Request Entity Too Large",
		"DELETE /v1/tasks/{name} Accepted", "DELETE /v1/tasks/{name} Bad Request", "DELETE /v1/tasks/{name} Not Found",
		"POST /v1/tasks/{name}/run OK", "POST /v1/tasks/{name}/run Not Found",
		"POST /v1/tasks/{name}/run Conflict", "POST /v1/tasks/{name}/run Internal Server Error",
		"GET /v1/tasks/{name}/events OK", "GET /v1/tasks/{name}/events Not Found", "GET /v1/tasks/{name}/events Bad Request",
		"GET /v1/tasks/{name}/events/{id} OK", "GET /v1/tasks/{name}/events/{id} Not Found",
		"GET /v1/status/runs OK", "GET /v1/status/runs Bad Request", "GET /v1/status/runs Not Found",
		"GET /v1/tasks/{name}/events/{id}/log OK", "GET /v1/tasks/{name}/events/{id}/log Not Found",
		"GET /v1/tasks/{name}/plan OK", "GET /v1/tasks/{name}/plan Not Found",
		"POST /v1/tasks/{name}/plan/{id}/approve OK", "POST /v1/tasks/{name}/plan/{id}/approve Conflict", "POST /v1/tasks/{name}/plan/{id}/approve Not Found",
		"POST /v1/tasks/{name}/plan/{id}/reject OK", "POST /v1/tasks/{name}/plan/{id}/reject Conflict", "POST /v1/tasks/{name}/plan/{id}/reject Not Found",
	}
	coveredMu.Lock()
	defer coveredMu.Unlock()
	for _, w := range want {
		if !covered[w] {
			t.Errorf("not exercised: %s", w)
		}
	}
	for _, r := range specRoutes(loadSpec(t)) {
		if !covered[r] {
			t.Errorf("spec operation never called: %s", r)
		}
	}
}

func drain(ch chan string) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
