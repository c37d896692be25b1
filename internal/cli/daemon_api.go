package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/task"
)

// deregisterTimeout bounds the deregistration at shutdown.
const deregisterTimeout = 5 * time.Second

// startAPI builds the daemon's API server and binds its port, so that a
// port in use stops the daemon before anything else starts.
func (a *app) startAPI() (*ctsapi.Server, error) {
	srv, err := ctsapi.New(ctsapi.Options{
		Addr:         a.cfg.ListenAddress(),
		TLS:          a.cfg.TLS,
		Controller:   a.coord.API(a.ctrl), // ha.go: saves API changes with high availability
		Cluster:      a.coord.Cluster(),
		Logger:       a.log.With("component", "api"),
		BufferPeriod: a.cfg.BufferPeriod,
		RemovalDelay: a.cfg.RemovalDelay,
		Redactor:     a.obs.redactor,
		Validate:     a.validateAPITask,
		Approvals:    approvalsOf(a.ctrl), // approval.go
		Health:       func() error { return errors.Join(a.ctrl.Live(), a.registry.Live()) },
		// Access control (internal/api/security.go, docs/security.md).
		Tokens:         a.cfg.APIAuth.Tokens,
		Tasks:          a.cfg.APITasks,
		HTTP:           a.apiHTTP(),
		LogDirs:        a.logDirs(),
		FileTask:       a.isFileTask, // reload.go: PATCH changes only their enabled flag
		ReloadOnSIGHUP: false,        // the systemd part reloads on SIGHUP and tells systemd (systemd.go)
	})
	if err != nil {
		return nil, err
	}
	a.mountObserve(srv)
	a.secrets.attachAPI(srv) // api_auth secrets from Vault follow it (secretfields.go)
	if err := srv.Listen(); err != nil {
		return nil, err
	}
	a.apiAddr = srv.Addr()
	return srv, nil
}

// selfRegister registers ctsync as a Consul service in the background
// unless consul.service_registration is disabled; a failure is a warning.
// Once registered, the service is registered again whenever the agent
// loses it (consul.KeepRegistered) until ctx ends or the returned function
// is called: it stops that, waits for the registration attempt to end and
// deregisters the service if it was registered.
func (a *app) selfRegister(ctx context.Context) (deregister func()) {
	bound := a.apiAddr // the port too when port = 0 picked one
	if bound == "" {
		bound = a.cfg.ListenAddress()
	}
	reg, ok := consul.RegistrationFromConfig(a.cfg.Consul.ServiceRegistration, a.cfg.ID, bound, a.cfg.TLS.Enabled)
	if !ok {
		return func() {}
	}
	reg = a.coord.Registration(reg) // ha.go: the cluster tag
	log := a.log.With("component", "registration")
	ctx, stop := context.WithCancel(ctx)
	done := make(chan bool, 1)
	go func() {
		err := consul.Register(ctx, a.client.Client, reg, log)
		if err != nil && ctx.Err() == nil {
			log.Warn("self-registration with consul failed; continuing without it", "error", err)
		}
		if err == nil {
			if err := consul.KeepRegistered(ctx, a.client.Client, reg, log); err != nil {
				log.Warn("ctsync's service is no longer kept registered with consul", "error", err)
			}
		}
		// Interrupted by the shutdown, the registration may have reached
		// the agent: deregister to be sure.
		done <- err == nil || ctx.Err() != nil
	}()
	return func() {
		stop()
		if !<-done {
			return
		}
		dctx, cancel := context.WithTimeout(context.Background(), deregisterTimeout)
		defer cancel()
		if err := consul.Deregister(dctx, a.client.Client, reg, log); err != nil {
			if consul.IsUnknownService(err) {
				log.Debug("nothing to deregister from consul", "error", err)
				return
			}
			log.Warn("deregistration from consul failed", "error", err)
		}
	}
}

// validateAPITask checks what the API cannot know alone about a task
// created through it: a local module is a directory here, and a provider
// alias it names is configured (a terraform_provider block with that
// alias). A provider named without an alias needs no block: its default
// configuration is used, as for a task in a configuration file and as CTS
// does.
func (a *app) validateAPITask(s task.Spec) error {
	if err := task.CheckLocalModule(s.Module); err != nil {
		return &task.FieldError{Field: "module", Msg: err.Error()}
	}
	return a.checkProviders(s)
}

// checkProviders checks that each provider alias the task names is
// configured (a terraform_provider block with that alias).
func (a *app) checkProviders(s task.Spec) error {
	for i, ref := range s.Providers {
		if !strings.Contains(ref, ".") {
			continue
		}
		if !slices.ContainsFunc(a.cfg.Providers, func(p config.Provider) bool { return p.Ref() == ref }) {
			return &task.FieldError{Field: fmt.Sprintf("providers[%d]", i),
				Msg: fmt.Sprintf("provider %q is not configured: add a terraform_provider block with this alias to the daemon's configuration", ref)}
		}
	}
	return nil
}

// checkStoredTask validates a task record read from Consul KV (high
// availability) as the API validates a new task (ha.FilterStored).
func (a *app) checkStoredTask(key string, s task.Spec) error {
	return ctsapi.CheckStoredTask(key, s, a.apiTasks(), a.validateAPITask)
}

// apiHTTP is the api_http block plus the names this instance is known by
// in Consul (its service address, its health check address, its HA
// instance address): requests naming them pass the Host guard.
func (a *app) apiHTTP() config.APIHTTP {
	h := a.cfg.APIHTTP
	h.AllowedHosts = slices.Clone(h.AllowedHosts)
	add := func(addr string) {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			return
		}
		if u, err := url.Parse(addr); err == nil && u.Host != "" {
			addr = u.Host
		}
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
		if addr != "" && !strings.ContainsAny(addr, "/ @") {
			h.AllowedHosts = append(h.AllowedHosts, addr)
		}
	}
	sr := a.cfg.Consul.ServiceRegistration
	add(sr.Address)
	add(sr.DefaultCheck.Address)
	if a.cfg.HA != nil {
		add(a.cfg.HA.InstanceAddress)
	}
	return h
}

// logDirs are the directories whose run logs the API serves: working_dir
// and the tasks' own working directories (of the start's files, and of
// more: the tasks of a reload).
func (a *app) logDirs(more ...[]task.Spec) []string {
	var dirs []string
	all := append([]string{a.cfg.WorkingDir}, taskDirs(a.cfg.Tasks)...)
	for _, specs := range more {
		all = append(all, taskDirs(specs)...)
	}
	for _, d := range all {
		if abs, err := filepath.Abs(d); err == nil && !slices.Contains(dirs, abs) {
			dirs = append(dirs, abs)
		}
	}
	return dirs
}

func taskDirs(specs []task.Spec) []string {
	var out []string
	for _, s := range specs {
		if s.WorkingDir != "" {
			out = append(out, s.WorkingDir)
		}
	}
	return out
}
