package reconcile

import (
	"context"
	"errors"
	"sync"
)

// errTaskDeleting is why a deletion stops the task's policy evaluation.
var errTaskDeleting = errors.New("the task is being deleted")

// evalStop lets a deletion stop the policy evaluation of the task's run in
// progress at once, instead of waiting for it to end or reach its time
// limit (Delete waits for the run in progress to end): nothing was applied
// yet and the verdict no longer matters. Its own lock, not c.mu: the run
// takes it without the controller's.
type evalStop struct {
	mu      sync.Mutex
	cancel  context.CancelCauseFunc
	stopped bool // a deletion is under way: evaluations stop at once
}

// begin returns the context of one policy evaluation, cancelled by stop,
// and the func that ends it.
func (s *evalStop) begin(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	if s.stopped {
		cancel(errTaskDeleting)
	}
	s.cancel = cancel
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
		cancel(nil)
	}
}

// stop cancels the evaluation in progress and the ones that begin until
// resume.
func (s *evalStop) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.cancel != nil {
		s.cancel(errTaskDeleting)
	}
}

// resume undoes stop (a deletion abandoned: the task stays).
func (s *evalStop) resume() {
	s.mu.Lock()
	s.stopped = false
	s.mu.Unlock()
}
