package consul

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"time"

	"github.com/hashicorp/consul/api"
)

// WaitReady blocks until the agent answers /v1/status/leader with a
// non-empty leader, retrying with Backoff (250ms .. 10s, full jitter) and
// logging one warning per failed attempt. It returns nil once Consul is
// usable and ctx.Err() when ctx ends first.
func WaitReady(ctx context.Context, client *api.Client, logger *slog.Logger) error {
	return waitReady(ctx, client, logger, NewBackoff(DefaultBackoffBase, DefaultBackoffCap))
}

func waitReady(ctx context.Context, client *api.Client, logger *slog.Logger, bo *Backoff) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		leader, err := client.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
		if err == nil && leader != "" {
			if bo.Attempts() > 0 {
				logger.Info("consul reachable", "leader", leader, "attempts", bo.Attempts()+1)
			}
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err == nil {
			err = errors.New("no cluster leader yet")
		}
		delay := bo.Next()
		attrs := []any{"error", err.Error(), "retry_in", delay.Round(time.Millisecond).String(), "attempt", bo.Attempts()}
		if a := errAddress(err); a != "" {
			attrs = append([]any{"address", a}, attrs...)
		}
		logger.Warn("consul not reachable, retrying", attrs...)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// errAddress extracts scheme://host from a transport error, which the API
// library returns as a *url.Error carrying the request URL. The client does
// not expose its configured address otherwise.
func errAddress(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			return u.Scheme + "://" + u.Host
		}
	}
	return ""
}
