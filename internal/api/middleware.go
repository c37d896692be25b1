package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"
)

type ctxKey int

const requestIDKey ctxKey = iota

// requestID returns the request's id, set by the middleware.
func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey).(string)
	return id
}

// middleware wraps the mux, outermost first: request id, debug logging
// and panic recovery; the access rules (CORS, cross-origin writes, Host,
// tokens: security.go) come next.
func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		id := uuid.NewString()
		h.Set("X-Request-Id", id)
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey, id))
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("api handler panicked", "method", r.Method, "path", r.URL.Path, "request_id", id, "panic", p)
				if rec.status == 0 {
					writeError(rec, r, http.StatusInternalServerError, "internal server error")
				}
			}
			if r.URL.Path != "/v1/health" {
				s.log.Debug("api request", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery,
					"status", rec.code(), "duration", time.Since(start).Round(time.Microsecond),
					"request_id", id, "remote", r.RemoteAddr)
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

// statusRecorder remembers the status code written.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeJSON writes v as the JSON response body with the status code.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeError writes the CTS error body with the request id.
func writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeJSON(w, status, ErrorResponse{Error: ErrorObject{Message: msg}, RequestID: requestID(r)})
}
