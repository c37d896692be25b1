package redact

import (
	"io"
	"sync"
)

// maxHeld bounds what a Writer holds back. Only text made of overlapping
// copies of a secret's beginning ("aaaa…" for a secret "aaaaX") can make
// it hold more than the longest secret; past this bound it writes what it
// holds, redacted as a whole.
const maxHeld = 64 << 10

// Writer redacts a stream on its way to w, so that a file never holds a
// secret in clear, not even for a moment: the text of each write is
// redacted before it is passed on, and its end is held back when it could
// be the beginning of a secret that the next write completes (a secret cut
// across two writes). Flush writes what is held. The secrets are those of
// the Redactor at the time of each write (it may grow, see Add). A nil
// Redactor passes everything through. A Writer is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	r   *Redactor
	buf []byte
}

// NewWriter returns a Writer that redacts r's secrets from what it writes
// to w.
func NewWriter(w io.Writer, r *Redactor) *Writer { return &Writer{w: w, r: r} }

// Write redacts p (with what was held from the previous write) and writes
// all of it to the underlying writer but a possible beginning of a secret.
// It reports len(p) unless the underlying writer fails.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.r.matcher()
	if m == nil && len(w.buf) == 0 {
		if _, err := w.w.Write(p); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	cut := len(w.buf)
	if m != nil {
		cut = m.safeCut(w.buf)
	}
	if cut == 0 && len(w.buf) > maxHeld {
		cut = len(w.buf)
	}
	if err := w.emit(m, cut); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes, redacted, what is held back.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.emit(w.r.matcher(), len(w.buf))
}

// emit writes buf[:n] redacted and keeps the rest.
func (w *Writer) emit(m *matcher, n int) error {
	if n == 0 {
		return nil
	}
	out := w.buf[:n]
	if m != nil {
		out = []byte(m.rep.Replace(string(out)))
	}
	rest := copy(w.buf, w.buf[n:])
	w.buf = w.buf[:rest]
	_, err := w.w.Write(out)
	return err
}

// safeCut returns how much of b can be redacted and written now: all of it
// but its longest end that is the beginning of a secret, moved back further
// while a whole secret straddles the cut (redacting the two parts apart
// would miss it).
func (m *matcher) safeCut(b []byte) int {
	cut := len(b)
	// The longest end of b that a secret starts with (and goes beyond).
	for k := min(m.longest-1, len(b)); k > 0; k-- {
		if m.startsSecret(b[len(b)-k:]) {
			cut = len(b) - k
			break
		}
	}
	for moved := true; moved && cut > 0; {
		moved = false
		for _, s := range m.patterns {
			for i := max(0, cut-len(s)+1); i < cut; i++ {
				if i+len(s) <= len(b) && string(b[i:i+len(s)]) == s {
					cut, moved = i, true
					break
				}
			}
		}
	}
	return cut
}

// startsSecret reports whether some secret begins with tail and is longer.
func (m *matcher) startsSecret(tail []byte) bool {
	for _, s := range m.patterns {
		if len(s) > len(tail) && s[:len(tail)] == string(tail) {
			return true
		}
	}
	return false
}
