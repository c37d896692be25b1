package cli

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/task"
)

// deregisterTimeout bounds the deregistration at shutdown.
const deregisterTimeout = 5 * time.Second

// startAPI builds the daemon's API server and binds its port, so that a
// port in use stops the daemon before anything else starts.
func (a *app) startAPI() (*ctsapi.Server, error) {
	configured := map[string]bool{}
	for _, p := range a.cfg.Providers {
		configured[p.Ref()] = true
	}
	srv, err := ctsapi.New(ctsapi.Options{
		Addr:         net.JoinHostPort("", strconv.Itoa(a.cfg.Port)),
		TLS:          a.cfg.TLS,
		Controller:   a.apiController(), // ha.go: saves API changes with high availability
		Cluster:      a.apiCluster(),
		Logger:       a.log.With("component", "api"),
		BufferPeriod: a.cfg.BufferPeriod,
		Redact:       a.obs.redactor.Redact,
		// A task created through the API may only use providers that are
		// configured (terraform_provider blocks).
		Validate: func(s task.Spec) error {
			for i, ref := range s.Providers {
				if !configured[ref] {
					return &task.FieldError{Field: fmt.Sprintf("providers[%d]", i),
						Msg: fmt.Sprintf("provider %q is not configured: add a terraform_provider block for it to the daemon's configuration", ref)}
				}
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	a.mountObserve(srv)
	if err := srv.Listen(); err != nil {
		return nil, err
	}
	return srv, nil
}

// selfRegister registers ctsync as a Consul service in the background
// unless consul.service_registration is disabled; a failure is a warning.
// The returned function waits for the registration attempt to end and
// deregisters the service if it was registered.
func (a *app) selfRegister(ctx context.Context) (deregister func()) {
	reg, ok := consul.RegistrationFromConfig(a.cfg)
	if !ok {
		return func() {}
	}
	reg = a.haRegistration(reg) // ha.go: the cluster tag
	log := a.log.With("component", "registration")
	done := make(chan bool, 1)
	go func() {
		err := consul.Register(ctx, a.client.Client, reg, log)
		if err != nil && ctx.Err() == nil {
			log.Warn("self-registration with consul failed; continuing without it", "error", err)
		}
		// Interrupted by the shutdown, the registration may have reached
		// the agent: deregister to be sure.
		done <- err == nil || ctx.Err() != nil
	}()
	return func() {
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
