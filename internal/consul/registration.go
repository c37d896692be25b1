package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/config"
)

// Self-registration defaults (CTS values).
const (
	// ServiceTag is the tag of the registered service.
	ServiceTag = "cts"
	// HealthCheckName is the name of the registered HTTP check.
	HealthCheckName = "CTS Health Status"
	// HealthCheckNotes describes the check in Consul.
	HealthCheckNotes = "Check created by ctsync (Consul-Terraform-Sync compatible)"

	checkInterval       = "10s"
	checkTimeout        = "2s"
	checkDeregisterTime = "30m"

	// registerAttempts bounds how often a registration or deregistration is
	// tried (CTS retries up to 8 times).
	registerAttempts = 8
)

// registerBackoff is the first and the largest delay between attempts.
var registerBackoff = [2]time.Duration{DefaultBackoffBase, 2 * time.Second}

// AgentAPI is what registration needs from a Consul client: both
// *api.Client and *Client provide it.
type AgentAPI interface {
	Agent() *api.Agent
}

// Registration is ctsync's own service in the Consul catalog.
type Registration struct {
	// ID is the service ID (the instance id, config `id`).
	ID string
	// Name is the service name (default "consul-terraform-sync").
	Name string
	// Address is the service address; empty lets the agent use its node's.
	Address   string
	Namespace string
	// Port is the API port.
	Port int
	// Tags default to ["cts"].
	Tags []string
	// Check adds the HTTP health check on /v1/health.
	Check bool
	// CheckAddress is scheme://host:port of the check; empty means
	// http(s)://<ListenHost or localhost>:<Port>.
	CheckAddress string
	// ListenHost is the IP address the API is bound to, "" for every
	// interface.
	ListenHost string
	// TLS says the API serves HTTPS (for the default check address).
	TLS bool
}

// RegistrationFromConfig returns the registration consul.service_registration,
// the instance id, the API's bound listen address (host:port) and whether
// the API uses TLS ask for, and false when the registration is disabled.
//
// An API bound to one IP address (address = "10.0.0.5:8558", or a
// loopback one) is registered with that address, unless
// service_registration.address names another, and its default check
// calls it there: the agent's node address and localhost would not reach
// it. Bound to every interface, the agent's node address and
// http(s)://localhost:<port> serve, as in CTS.
func RegistrationFromConfig(sr config.ServiceRegistration, id, listen string, tls bool) (Registration, bool) {
	if !sr.Enabled {
		return Registration{}, false
	}
	host, port := listenHostPort(listen)
	addr := sr.Address
	if addr == "" {
		addr = host
	}
	return Registration{
		ID:           id,
		Name:         sr.ServiceName,
		Address:      addr,
		Namespace:    sr.Namespace,
		Port:         port,
		Tags:         []string{ServiceTag},
		Check:        sr.DefaultCheck.Enabled,
		CheckAddress: sr.DefaultCheck.Address,
		ListenHost:   host,
		TLS:          tls,
	}, true
}

// listenHostPort splits a bound address: the host is "" when it is every
// interface (an empty or unspecified address).
func listenHostPort(listen string) (string, int) {
	h, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0
	}
	port, _ := strconv.Atoi(p)
	if ip, err := netip.ParseAddr(h); err != nil || ip.IsUnspecified() {
		return "", port
	}
	return h, port
}

// service builds the agent registration: the service and, with Check, an
// HTTP check that starts critical and is removed with the service after
// 30 minutes of failing.
func (r Registration) service() *api.AgentServiceRegistration {
	name := r.Name
	if name == "" {
		name = config.DefaultServiceName
	}
	tags := r.Tags
	if tags == nil {
		tags = []string{ServiceTag}
	}
	svc := &api.AgentServiceRegistration{
		ID:        r.ID,
		Name:      name,
		Tags:      tags,
		Port:      r.Port,
		Address:   r.Address,
		Namespace: r.Namespace,
	}
	if r.Check {
		addr := r.CheckAddress
		if addr == "" {
			scheme := "http"
			if r.TLS {
				scheme = "https"
			}
			host := "localhost"
			if r.ListenHost != "" {
				host = r.ListenHost
			}
			addr = scheme + "://" + net.JoinHostPort(host, strconv.Itoa(r.Port))
		}
		svc.Checks = api.AgentServiceChecks{{
			CheckID:                        r.ID + "-health",
			Name:                           HealthCheckName,
			Notes:                          HealthCheckNotes,
			HTTP:                           addr + "/v1/health",
			Method:                         http.MethodGet,
			Interval:                       checkInterval,
			Timeout:                        checkTimeout,
			DeregisterCriticalServiceAfter: checkDeregisterTime,
			TLSSkipVerify:                  true,
			Status:                         api.HealthCritical,
		}}
	}
	return svc
}

// Register registers ctsync as a service with the local agent, retrying
// transient failures (up to 8 attempts with backoff). A permission error
// is not retried and says which ACL permission is missing.
func Register(ctx context.Context, client AgentAPI, r Registration, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	svc := r.service()
	err := retry(ctx, func() error {
		return client.Agent().ServiceRegisterOpts(svc, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx))
	})
	if err != nil {
		return fmt.Errorf("registering service %q (id %q) with consul: %w%s", svc.Name, svc.ID, err, aclHint(err, svc.Name))
	}
	logger.Info("registered with consul", "service", svc.Name, "id", svc.ID, "port", svc.Port, "check", r.Check)
	return nil
}

// Deregister removes the service registered by Register.
func Deregister(ctx context.Context, client AgentAPI, r Registration, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	q := (&api.QueryOptions{Namespace: r.Namespace}).WithContext(ctx)
	err := retry(ctx, func() error { return client.Agent().ServiceDeregisterOpts(r.ID, q) })
	if err != nil {
		return fmt.Errorf("deregistering service id %q from consul: %w%s", r.ID, err, aclHint(err, r.Name))
	}
	logger.Info("deregistered from consul", "id", r.ID)
	return nil
}

// retry runs fn until it succeeds, fails permanently (4xx) or has been
// tried registerAttempts times.
func retry(ctx context.Context, fn func() error) error {
	bo := NewBackoff(registerBackoff[0], registerBackoff[1])
	var err error
	for attempt := 1; ; attempt++ {
		if err = fn(); err == nil {
			return nil
		}
		var se api.StatusError
		if errors.As(err, &se) && se.Code >= 400 && se.Code < 500 && se.Code != http.StatusTooManyRequests {
			return err
		}
		if attempt >= registerAttempts {
			return err
		}
		t := time.NewTimer(bo.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// IsUnknownService reports whether err is a 404 from the agent (for example,
// deregistering a service it does not know).
func IsUnknownService(err error) bool {
	var se api.StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

func aclHint(err error, name string) string {
	var se api.StatusError
	if errors.As(err, &se) && se.Code == http.StatusForbidden {
		if name == "" {
			name = config.DefaultServiceName
		}
		return fmt.Sprintf(" (the consul token needs service:write on %q)", name)
	}
	return ""
}

// keepWait is how long one blocking query on the registration waits for a
// change (Consul may cut it short).
const keepWait = 5 * time.Minute

// KeepRegistered watches the registration made by Register with a blocking
// query on the agent (/v1/agent/service/<id>) and registers the service
// again when the agent no longer has it: the agent restarted without its
// data, or someone deregistered it. An unreachable agent is retried with
// backoff. It returns when ctx ends (or with a permission error, which
// retrying cannot fix).
func KeepRegistered(ctx context.Context, client AgentAPI, r Registration, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bo := NewBackoff(0, 0)
	hash := ""
	for ctx.Err() == nil {
		q := (&api.QueryOptions{Namespace: r.Namespace, WaitHash: hash, WaitTime: keepWait}).WithContext(ctx)
		_, meta, err := client.Agent().Service(r.ID, q)
		switch {
		case err == nil:
			bo.Reset()
			hash = meta.LastContentHash
			continue
		case ctx.Err() != nil:
		case IsUnknownService(err):
			hash = ""
			logger.Warn("the consul agent no longer has ctsync's service; registering it again", "id", r.ID)
			err = Register(ctx, client, r, logger)
			if err == nil {
				bo.Reset()
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			var se api.StatusError
			if errors.As(err, &se) && se.Code == http.StatusForbidden {
				return err
			}
			logger.Warn("registering ctsync's service again failed; retrying", "error", err)
		default:
			logger.Debug("cannot watch ctsync's registration; retrying", "error", err)
		}
		t := time.NewTimer(bo.Next())
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return nil
}
