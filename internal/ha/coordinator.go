package ha

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// Coordinator is this instance's part in a cluster, chosen once at start
// from the high_availability block (NewCoordinator): Solo without it (the
// instance runs every task), Leader (one elected instance runs every task,
// the others follow) or Spread (spread_tasks: the members share the tasks).
// The daemon wires what it returns and decides nothing by itself.
type Coordinator interface {
	// Store is where the controller records runs: the local store alone,
	// the cluster's state in Consul KV (fenced) otherwise.
	Store() store.Store
	// Driver wraps the task drivers so that Terraform runs a task only
	// while this instance may run it (leads, or owns the task).
	Driver(factory reconcile.DriverFactory) reconcile.DriverFactory
	// Standby reports whether the controller starts inactive (a follower
	// until elected, a member until joined).
	Standby() bool
	// KillBound is how long an interrupted Terraform may take to stop
	// before it is killed (the timing's kill bound; 0: the driver's
	// default).
	KillBound() time.Duration
	// API is the controller the API uses: in a cluster it saves every task
	// change in the cluster's store (Persisting).
	API(ctrl Controller) ctsapi.Controller
	// Cluster is the API's view of the cluster (nil alone:
	// /v1/status/cluster then answers 405, as CTS).
	Cluster() ctsapi.Cluster
	// Registration adds the cluster tag to the self-registration.
	Registration(reg consul.Registration) consul.Registration
	// Parts are the long-lived parts that take part in the cluster for
	// ctrl (none alone): the membership (the elector or the spreader),
	// the refresh of this instance's copy of the cluster's state and the
	// compatibility checks.
	Parts(ctrl Controller) []Part
	// Resign hands the lead (or the owned tasks) over once the runs in
	// progress are over; the membership part then returns.
	Resign()
	// Restore, alone, applies to ctrl the task records of the local
	// store (tasks created, enabled or deleted through the API before a
	// restart): the daemon calls it once the watches run and before the
	// controller does. In a cluster it does nothing: each term applies
	// the cluster's records.
	Restore(ctx context.Context, ctrl Controller) error
	// Reconfigure replaces the configured tasks with specs after a reload
	// of the configuration files, and runs apply (which changes the
	// controller's tasks) while no API change and no application of the
	// stored records is under way.
	Reconfigure(specs []task.Spec, apply func() error) error
}

// Controller is the task controller as the coordinator drives it: the
// task operations (applied from the cluster's records, and saved by
// Persisting), its activity, and in spread mode the tasks it may run.
// *reconcile.Controller implements it.
type Controller interface {
	ctsapi.Controller
	SetActive(active bool)
	WaitActive(ctx context.Context) error
	SetOwned(owns func(task string) bool)
	TaskNames() []string
	ChainGroups() map[string]string
	Busy(task string) bool
}

var _ Controller = (*reconcile.Controller)(nil)

// Part is one long-lived part of the daemon: Run runs until its context
// ends. Back parts stop only once the controller's runs are over.
type Part struct {
	Name string
	Back bool
	Run  func(ctx context.Context) error
}

// CoordinatorOptions configure NewCoordinator.
type CoordinatorOptions struct {
	// HA is the high_availability block; nil: this instance runs alone.
	HA     *config.HA
	Client *api.Client
	// ID is this instance's id; Port its API port (the default port of
	// its advertised address, instance.address).
	ID   string
	Port int
	// ServiceName is the service of the self-registrations, which list
	// the cluster's members.
	ServiceName string
	// History is how many events are kept per task.
	History int
	// Tasks are the configured tasks.
	Tasks []task.Spec
	// Self describes this instance for the compatibility checks (its
	// Terraform binary); called when they start.
	Self func() Instance
	// ResetStorage is -reset-storage: the cluster's stored state is
	// deleted when this instance becomes leader (every term) or first
	// joins (spread mode).
	ResetStorage bool
	// CheckStored validates a task record read from Consul KV as the API
	// validates a new task (FilterStored).
	CheckStored func(key string, spec task.Spec) error
	// Local returns the store of an instance running alone (only called
	// then).
	Local func() (store.Store, error)
	// Logger is the daemon's logger: the coordinator's lines get the
	// component "ha" ("ha.compat" for the compatibility checks).
	Logger *slog.Logger
	// Metrics is told about leadership and compatibility; SpreadMetrics,
	// called once in spread mode, returns where ownership is reported.
	Metrics       Metrics
	SpreadMetrics func() SpreadMetrics
}

// NewCoordinator returns the coordinator the options ask for: Solo without
// a high_availability block, Spread with spread_tasks, Leader otherwise.
func NewCoordinator(o CoordinatorOptions) (Coordinator, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = nopMetrics{}
	}
	if o.HA == nil {
		return newSolo(o)
	}
	if o.Client == nil {
		return nil, errors.New("ha: a consul client is required")
	}
	o.Metrics.SetLeader(false) // a follower (or a member without a leader) until elected
	c := newMembership(o)
	if o.HA.SpreadTasks {
		return newSpread(c)
	}
	return newLeader(c)
}

// Solo is the coordinator of an instance without high availability: it
// runs every task, with its own store, which keeps the tasks changed
// through the API (Persisting) so that a restart restores them (Restore).
type Solo struct {
	st         store.Store
	configured *Configured
	check      func(key string, spec task.Spec) error
	log        *slog.Logger
	mu         sync.Mutex // Persisting.Mu
}

func newSolo(o CoordinatorOptions) (*Solo, error) {
	if o.ResetStorage {
		o.Logger.Warn("-reset-storage is ignored: high_availability is not configured")
	}
	o.Metrics.SetLeader(true)
	var st store.Store = store.NewMemory(o.History)
	if o.Local != nil {
		var err error
		if st, err = o.Local(); err != nil {
			return nil, err
		}
	}
	return &Solo{st: st, configured: NewConfigured(o.Tasks), check: o.CheckStored, log: o.Logger.With("component", "tasks")}, nil
}

// Store implements Coordinator.
func (s *Solo) Store() store.Store { return s.st }

// Driver implements Coordinator: the drivers run unfenced.
func (*Solo) Driver(f reconcile.DriverFactory) reconcile.DriverFactory { return f }

// Standby implements Coordinator: the controller is active from the start.
func (*Solo) Standby() bool { return false }

// KillBound implements Coordinator: the driver's default.
func (*Solo) KillBound() time.Duration { return 0 }

// API implements Coordinator: the controller, saving each task change
// through the API in the local store (the history database) when it keeps
// task records.
func (s *Solo) API(ctrl Controller) ctsapi.Controller {
	if p := s.persisting(ctrl); p != nil {
		return p
	}
	return ctrl
}

func (s *Solo) persisting(ctrl Controller) *Persisting {
	ts, ok := s.st.(store.Tasks)
	if !ok {
		return nil
	}
	return &Persisting{Controller: ctrl, Store: ts, Configured: s.configured, Logger: s.log, Mu: &s.mu, Where: "the history database", Forget: true}
}

// Restore implements Coordinator: the records of the local store are
// applied as a new leader applies the cluster's (ApplyStored): the tasks
// created through the API are created again, those deleted through it
// stay deleted, the enabled flags set through it are set. A configured
// task wins over a record of a task of the same name, which is ignored
// (and logged). A deletion with destroy that did not finish is finished
// once the controller runs.
func (s *Solo) Restore(ctx context.Context, ctrl Controller) error {
	p := s.persisting(ctrl)
	if p == nil {
		return nil
	}
	s.mu.Lock()
	configured, configOn := s.configured.Snapshot()
	recs := FilterStored(p.Store.TaskRecords(), configured, s.check, s.log)
	destroys, err := ApplyStored(ctx, ctrl, recs, configured, configOn, s.log)
	s.mu.Unlock()
	go ResumeDestroys(ctx, p, destroys, s.log)
	return err
}

// Reconfigure implements Coordinator.
func (s *Solo) Reconfigure(specs []task.Spec, apply func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.configured.Set(specs)
	return apply()
}

// Cluster implements Coordinator: none.
func (*Solo) Cluster() ctsapi.Cluster { return nil }

// Registration implements Coordinator: unchanged.
func (*Solo) Registration(reg consul.Registration) consul.Registration { return reg }

// Parts implements Coordinator: none.
func (*Solo) Parts(Controller) []Part { return nil }

// Resign implements Coordinator: nothing to hand over.
func (*Solo) Resign() {}

// AdvertisedAddress is instance.address with the API port when it has
// none.
func AdvertisedAddress(addr string, port int) string {
	if addr == "" || strings.Contains(addr, "://") {
		return addr
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(strings.Trim(addr, "[]"), strconv.Itoa(port))
}
