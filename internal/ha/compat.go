package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Instance is what an instance publishes about itself at
// <prefix>/members/<id>, for the compatibility checks of the others.
type Instance struct {
	ID               string    `json:"id"`
	TerraformVersion string    `json:"terraform_version"`
	OpenTofu         bool      `json:"opentofu,omitempty"`
	Updated          time.Time `json:"updated"`
}

func (i Instance) product() string {
	if i.OpenTofu {
		return "OpenTofu"
	}
	return "Terraform"
}

// Module is a task's module source.
type Module struct {
	Task, Source string
}

// CompatOptions configure the compatibility checks.
type CompatOptions struct {
	Client    *api.Client
	Prefix    string // <parent_path>/<cluster>
	Namespace string
	// Self is this instance (ID and Terraform binary).
	Self Instance
	// Leader returns the current leader's id ("" unknown).
	Leader func() (id, address string)
	// LeaderChanged, when set, returns a channel closed when Leader's
	// answer may have changed (the elector's LeaderChanged); without it
	// the first check waits the whole Settle for an unknown leader.
	LeaderChanged func() <-chan struct{}
	// Modules returns the module of every task this instance knows.
	Modules func() []Module
	// Logger gets the failures (use logger.With("component", "ha.compat")).
	Logger   *slog.Logger
	Metrics  Metrics
	Interval time.Duration // default CompatInterval
	// Settle bounds how long the first check waits for a leader to be
	// known, so that the version comparison has something to compare with
	// (default 30s).
	Settle time.Duration
}

// Compat checks that this instance can take over from the leader: every
// local module path exists here, and it runs the same Terraform product
// and major version as the leader. Problems are logged as errors and
// counted (Metrics.CompatFailures); the instance keeps running, as CTS
// does: it may still become leader, and then the affected tasks fail.
type Compat struct {
	o CompatOptions
}

// NewCompat returns the checks; Run runs them.
func NewCompat(o CompatOptions) *Compat {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = nopMetrics{}
	}
	if o.Interval <= 0 {
		o.Interval = CompatInterval
	}
	if o.Settle <= 0 {
		o.Settle = 30 * time.Second
	}
	if o.Leader == nil {
		o.Leader = func() (string, string) { return "", "" }
	}
	if o.Modules == nil {
		o.Modules = func() []Module { return nil }
	}
	return &Compat{o: o}
}

func (c *Compat) memberKey(id string) string {
	return strings.TrimRight(c.o.Prefix, "/") + "/members/" + id
}

// Run checks once the leader is known (or after Settle), then every
// Interval, until ctx is done.
func (c *Compat) Run(ctx context.Context) error {
	settle := time.NewTimer(c.o.Settle)
	defer settle.Stop()
wait:
	for {
		var changed <-chan struct{}
		if c.o.LeaderChanged != nil {
			changed = c.o.LeaderChanged()
		}
		if id, _ := c.o.Leader(); id != "" {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-settle.C:
			break wait
		case <-changed:
		}
	}
	every := time.NewTicker(c.o.Interval)
	defer every.Stop()
	for {
		c.Check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-every.C:
		}
	}
}

// Check publishes this instance's record, runs every check, logs and counts
// the failures, and returns them.
func (c *Compat) Check(ctx context.Context) []error {
	log := c.o.Logger
	self := c.o.Self
	self.Updated = time.Now().UTC()
	if err := c.publish(ctx, self); err != nil {
		log.Warn("cannot publish this instance's terraform version in consul", "error", err)
	}
	var fails []error
	for _, m := range c.o.Modules() {
		if !isLocal(m.Source) {
			continue
		}
		if _, err := os.Stat(m.Source); err != nil {
			fails = append(fails, fmt.Errorf("compatibility check failure: task %q: %w", m.Task, err))
		}
	}
	if id, _ := c.o.Leader(); id != "" && id != self.ID {
		leader, err := c.read(ctx, id)
		switch {
		case err != nil:
			log.Warn("cannot read the leader's terraform version from consul", "leader", id, "error", err)
		case leader == nil:
			log.Debug("the leader has not published its terraform version yet", "leader", id)
		case leader.OpenTofu != self.OpenTofu:
			fails = append(fails, fmt.Errorf("compatibility check failure: this instance runs %s %s, the leader %q runs %s %s",
				self.product(), self.TerraformVersion, id, leader.product(), leader.TerraformVersion))
		case major(leader.TerraformVersion) != major(self.TerraformVersion):
			fails = append(fails, fmt.Errorf("compatibility check failure: this instance runs %s %s, the leader %q runs %s %s (another major version)",
				self.product(), self.TerraformVersion, id, leader.product(), leader.TerraformVersion))
		}
	}
	for _, f := range fails {
		log.Error("instance is not compatible with the cluster", "error", f)
	}
	c.o.Metrics.CompatFailures(len(fails))
	return fails
}

func (c *Compat) publish(ctx context.Context, self Instance) error {
	b, _ := json.Marshal(self)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.o.Client.KV().Put(&api.KVPair{Key: c.memberKey(self.ID), Value: b},
		(&api.WriteOptions{Namespace: c.o.Namespace}).WithContext(ctx))
	return err
}

func (c *Compat) read(ctx context.Context, id string) (*Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, _, err := c.o.Client.KV().Get(c.memberKey(id), (&api.QueryOptions{Namespace: c.o.Namespace}).WithContext(ctx))
	if err != nil || p == nil {
		return nil, err
	}
	var in Instance
	if err := json.Unmarshal(p.Value, &in); err != nil {
		return nil, fmt.Errorf("reading %s: %w", p.Key, err)
	}
	return &in, nil
}

// isLocal reports whether a module source is a path on this machine (CTS:
// relative to ctsync's working directory).
func isLocal(src string) bool {
	return strings.HasPrefix(src, "./") || strings.HasPrefix(src, "../") || filepath.IsAbs(src)
}

func major(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexByte(v, '.'); i >= 0 {
		return v[:i]
	}
	return v
}
