package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ctsync/ctsync/internal/depth"
	"github.com/ctsync/ctsync/internal/task"
)

// httpError is an error with the status code it maps to.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// queryParams returns the query parameters, rejecting any that is repeated.
func queryParams(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("invalid query string: %v", err)
	}
	for k, vs := range q {
		if len(vs) > 1 {
			return nil, badRequest("query parameter %q must not be repeated", k)
		}
	}
	return q, nil
}

// runParam reads ?run=now|inspect ("" when absent).
func runParam(q url.Values) (string, error) {
	v := q.Get("run")
	switch v {
	case "", "now", "inspect":
		return v, nil
	}
	return "", badRequest("invalid value %q for query parameter run: must be \"now\" or \"inspect\"", v)
}

// readBody reads the whole request body, at most MaxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &httpError{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
		}
		return nil, badRequest("reading request body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, badRequest("request body is empty")
	}
	// Before any decoder recurses on it (docs/security.md).
	if err := depth.JSON(b, 0, false); err != nil {
		return nil, badRequest("request body %v", err)
	}
	return b, nil
}

// decodeStrict decodes one JSON value into v, rejecting unknown fields and
// trailing data. prefix names the value in messages ("task").
func decodeStrict(b []byte, v any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, prefix)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("request body must hold a single JSON object")
	}
	return nil
}

// jsonError turns a decoding error into a 400 that names the field.
func jsonError(err error, prefix string) *httpError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return badRequest("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("malformed JSON: unexpected end of input")
	case errors.As(err, &te):
		want := jsonTypeName(te.Type.Kind().String())
		field := te.Field
		if field == "" {
			return schemaError("invalid request body: cannot use a JSON %s as %s (value must be %s)", te.Value, want, want)
		}
		return schemaError("invalid value for %s: expected %s, got a JSON %s (value must be %s)", join(prefix, jsonPath(field)), want, te.Value, want)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		if prefix != "" {
			return schemaError("unknown field %s in %s (property %s is unsupported)", f, prefix, f)
		}
		return schemaError("unknown field %s (property %s is unsupported)", f, f)
	}
	return badRequest("invalid request body: %s", msg)
}

// schemaPrefix starts the message of a body that does not match the API's
// schema, as CTS words it (its OpenAPI validator): clients match on it.
const schemaPrefix = "request body has an error: doesn't match schema: "

// schemaError is a 400 for a body that does not match the schema: CTS's
// phrases, then ctsync's message with the field path.
func schemaError(format string, args ...any) *httpError {
	return badRequest(schemaPrefix+format, args...)
}

// jsonPath drops the names of embedded Go structs from a decoder field
// path ("condition.services.ServicesSelector.names"): JSON names in the
// API are lower case.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && p[0] >= 'A' && p[0] <= 'Z' {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}

func jsonTypeName(kind string) string {
	switch kind {
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "a number"
	}
	return kind
}

func join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// taskPresence records which optional task fields a request body set, so
// that defaults apply only to what is missing: a JSON bool that is absent
// decodes as false, but enabled and use_as_module_input default to true.
type taskPresence struct {
	Enabled       *bool           `json:"enabled"`
	WorkingDir    json.RawMessage `json:"working_dir"`
	VariableFiles json.RawMessage `json:"variable_files"`
	Policy        json.RawMessage `json:"policy"`
	RemovalDelay  json.RawMessage `json:"removal_delay"`
	Approval      *struct {
		Expire json.RawMessage `json:"expire"`
		Window json.RawMessage `json:"window"`
	} `json:"approval"`
	BufferPeriod *struct {
		Enabled *bool           `json:"enabled"`
		Min     json.RawMessage `json:"min"`
		Max     json.RawMessage `json:"max"`
	} `json:"buffer_period"`
	Condition struct {
		Services        *useInput `json:"services"`
		CatalogServices *useInput `json:"catalog_services"`
		ConsulKV        *useInput `json:"consul_kv"`
		Nodes           *useInput `json:"nodes"`
		Intentions      *useInput `json:"intentions"`
	} `json:"condition"`
}

type useInput struct {
	UseAsModuleInput *bool `json:"use_as_module_input"`
}

// decodeTask decodes the task object of a POST /v1/tasks body, applies the
// defaults of a task created through the API (as CTS: enabled and
// use_as_module_input true, the global buffer period unless set, none for
// schedule tasks) and validates it with the task's own rules (createTask
// then applies api_tasks and Options.Validate).
func (s *Server) decodeTask(raw json.RawMessage) (task.Spec, error) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return task.Spec{}, badRequest("task is required")
	}
	if err := checkSizes(raw); err != nil {
		return task.Spec{}, err
	}
	var p taskPresence
	if err := json.Unmarshal(raw, &p); err != nil {
		return task.Spec{}, jsonError(err, "task")
	}
	if p.WorkingDir != nil {
		return task.Spec{}, badRequest("task.working_dir cannot be set through the API")
	}
	if p.VariableFiles != nil {
		return task.Spec{}, badRequest("task.variable_files cannot be set through the API: send the values in task.variables")
	}
	if p.Policy != nil && string(p.Policy) != "null" {
		return task.Spec{}, badRequest("task.policy cannot be set through the API: policy files are read from ctsync's disk, so only its configuration files may name them")
	}
	// Durations first, so a bad one is reported with its field.
	// approval.expire: a configuration file's rule (task.ParseExpire),
	// on the value as sent: "0s" would otherwise be the same as no
	// expiry, and a number nanoseconds.
	if a := p.Approval; a != nil && a.Expire != nil && string(a.Expire) != "null" {
		var str string
		if err := json.Unmarshal(a.Expire, &str); err != nil {
			return task.Spec{}, badRequest("invalid value for task.approval.expire: must be a string holding a duration such as \"24h\", as in a configuration file")
		}
		if _, err := task.ParseExpire(str); err != nil {
			return task.Spec{}, badRequest("invalid value for task.approval.expire: %v", err)
		}
	}
	// approval.window and removal_delay: strings too, with the same rules
	// as in a configuration file.
	if a := p.Approval; a != nil && a.Window != nil && string(a.Window) != "null" {
		if _, err := durationString(a.Window, "task.approval.window", "2h", task.CheckWindow); err != nil {
			return task.Spec{}, err
		}
	}
	var ownDelay *time.Duration
	if p.RemovalDelay != nil && string(p.RemovalDelay) != "null" {
		v, err := durationString(p.RemovalDelay, "task.removal_delay", "30s", task.CheckRemovalDelay)
		if err != nil {
			return task.Spec{}, err
		}
		ownDelay = &v
	}
	var minSet, maxSet bool
	if bp := p.BufferPeriod; bp != nil {
		for _, f := range []struct {
			name string
			v    json.RawMessage
			set  *bool
		}{{"min", bp.Min, &minSet}, {"max", bp.Max, &maxSet}} {
			if f.v == nil || string(f.v) == "null" {
				continue
			}
			*f.set = true
			var d task.Duration
			if err := d.UnmarshalJSON(f.v); err != nil {
				return task.Spec{}, badRequest("invalid value for task.buffer_period.%s: %v", f.name, err)
			}
		}
	}
	var spec task.Spec
	if err := decodeStrict(raw, &spec, "task"); err != nil {
		return task.Spec{}, err
	}

	spec.Enabled = p.Enabled == nil || *p.Enabled
	if c := spec.Condition.Services; c != nil {
		c.UseAsModuleInput = useDefault(p.Condition.Services)
	}
	if c := spec.Condition.CatalogServices; c != nil {
		c.UseAsModuleInput = useDefault(p.Condition.CatalogServices)
	}
	if c := spec.Condition.ConsulKV; c != nil {
		c.UseAsModuleInput = useDefault(p.Condition.ConsulKV)
	}
	if c := spec.Condition.Nodes; c != nil {
		c.UseAsModuleInput = useDefault(p.Condition.Nodes)
	}
	if c := spec.Condition.Intentions; c != nil {
		c.UseAsModuleInput = useDefault(p.Condition.Intentions)
	}
	// The task's own buffer_period (the fields it sets) over the global
	// one; none for schedule tasks.
	var own task.BufferSetting
	if p.BufferPeriod != nil {
		own.Enabled = p.BufferPeriod.Enabled
		if bp := spec.BufferPeriod; bp != nil {
			if minSet {
				own.Min = &bp.Min
			}
			if maxSet {
				own.Max = &bp.Max
			}
		}
	}
	spec.SetBufferPeriod(own, s.bufferPeriod())
	spec.SetRemovalDelay(ownDelay, s.opts.RemovalDelay)

	if err := validateTask(&spec); err != nil {
		return task.Spec{}, err
	}
	return spec, nil
}

// durationString reads a duration field of a request as a configuration
// file writes it: a string holding a Go duration, then check (a number
// would be nanoseconds in Go's JSON, which nobody means).
func durationString(raw json.RawMessage, field, example string, check func(time.Duration) error) (time.Duration, error) {
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return 0, badRequest("invalid value for %s: must be a string holding a duration such as %q, as in a configuration file", field, example)
	}
	v, err := task.ParseDuration(str)
	if err == nil {
		err = check(v)
	}
	if err != nil {
		return 0, badRequest("invalid value for %s: %v", field, err)
	}
	return v, nil
}

func useDefault(u *useInput) bool {
	return u == nil || u.UseAsModuleInput == nil || *u.UseAsModuleInput
}

// validateTask runs the task's rules (task.Spec.Validate).
func validateTask(spec *task.Spec) error {
	if err := spec.Validate(); err != nil {
		return invalidTask(err)
	}
	return nil
}

func invalidTask(err error) error {
	var fe *task.FieldError
	if errors.As(err, &fe) {
		// A missing required property of the schema (name, module,
		// condition) in CTS's words too.
		switch fe.Field {
		case "name", "module", "condition":
			if fe.Msg == "is required" {
				return schemaError("invalid task: %s: %s (property %q is missing)", fe.Field, fe.Msg, fe.Field)
			}
		}
		return badRequest("invalid task: %s: %s", fe.Field, fe.Msg)
	}
	return badRequest("invalid task: %v", err)
}

// Size limits of a task created through the API (docs/api.md), besides
// MaxBodyBytes for the whole body (413). A longer value is a 400 that
// names the field. The task's name has task.MaxNameLength (a rule of the
// task, checked by its validation).
const (
	// MaxDescriptionBytes bounds task.description.
	MaxDescriptionBytes = 4 << 10
	// MaxVariableBytes bounds the value of each of task.variables (HCL
	// expression text: a list or an object may be long).
	MaxVariableBytes = 64 << 10
	// MaxStringBytes bounds every other string of the task (module,
	// version, filters, regexps, KV paths, service names, meta values...).
	MaxStringBytes = 4 << 10
	// MaxKeyBytes bounds the keys of the task's objects (variable names,
	// meta keys).
	MaxKeyBytes = 1 << 10
)

// checkSizes applies the size limits to every string of a task body: a
// task is kept in memory, written into files, sent to Consul (high
// availability) and shown by the API and the dashboard, so none of its
// free-text fields may be unbounded.
func checkSizes(raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil // the strict decoding reports it with its field
	}
	return walkSizes("task", v)
}

func walkSizes(field string, v any) error {
	switch x := v.(type) {
	case string:
		if limit := sizeLimit(field); len(x) > limit {
			return badRequest("invalid task: %s is %d bytes long: at most %d are accepted", field, len(x), limit)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if len(k) > MaxKeyBytes {
				return badRequest("invalid task: %s has a key of %d bytes: at most %d are accepted", field, len(k), MaxKeyBytes)
			}
			if err := walkSizes(field+"."+k, x[k]); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := walkSizes(fmt.Sprintf("%s[%d]", field, i), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// sizeLimit is the longest string accepted at field.
func sizeLimit(field string) int {
	switch {
	case field == "task.description":
		return MaxDescriptionBytes
	case strings.HasPrefix(field, "task.variables.") && !strings.Contains(field[len("task.variables."):], "."):
		return MaxVariableBytes
	}
	return MaxStringBytes
}
