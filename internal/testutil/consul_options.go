package testutil

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// ConsulOptions customise the dev agent of NewConsul.
type ConsulOptions struct {
	// HTTPPort is the HTTP API port; 0 picks a free one. Fault tests choose
	// the port first, point ctsync at it, and start the agent later.
	HTTPPort int
	// ACLToken, when set, turns ACLs on with default_policy "deny" and
	// makes ACLToken the initial management token (and the agent's own
	// token, so anti-entropy can sync). Client carries the token; anything
	// else talking to the agent needs it too.
	ACLToken string
	// HCL holds extra agent configuration, one -hcl argument each (e.g.
	// `limits { kv_max_value_size = 2097152 }`).
	HCL []string
	// Peering opens the gRPC TLS port (on a free port), which cluster
	// peering uses between servers: peering tokens carry its address, and
	// the dialing cluster connects to it (TLS from the agent's built-in CA).
	Peering bool
	// Node is the agent's node name; "" is "node-1".
	Node string
	// DataDir, when set, runs a single server that keeps its data there
	// (raft: KV, sessions, catalog; and the agent's own registrations)
	// instead of a dev agent, so that Restart is a crash and restart of a
	// real agent rather than a wipe. It starts a few seconds slower (it
	// elects itself leader).
	DataDir string
}

// NewConsul prepares a dev agent on loopback without starting it: Addr is
// known at once, so a test can start ctsync against an agent that is not
// there yet. Start starts it; it is stopped when the test ends.
func NewConsul(t testing.TB, o ConsulOptions) *Consul {
	t.Helper()
	bin := Binary(t, "consul")
	httpPort := o.HTTPPort
	if httpPort == 0 {
		httpPort = FreePort(t)
	}
	ports := []int{FreePort(t), FreePort(t), FreePort(t)} // server, serf lan, serf wan
	node := o.Node
	if node == "" {
		node = "node-1"
	}
	grpcTLS := "-1"
	if o.Peering {
		grpcTLS = strconv.Itoa(FreePort(t))
	}
	mode := []string{"-dev"}
	if o.DataDir != "" {
		mode = []string{"-server", "-bootstrap-expect", "1", "-data-dir", o.DataDir}
	}
	args := append([]string{"agent"}, mode...)
	args = append(args, "-client", "127.0.0.1", "-bind", "127.0.0.1",
		"-http-port", strconv.Itoa(httpPort), "-grpc-port=-1", "-grpc-tls-port", grpcTLS, "-dns-port=-1",
		"-server-port", strconv.Itoa(ports[0]), "-serf-lan-port", strconv.Itoa(ports[1]),
		"-serf-wan-port", strconv.Itoa(ports[2]), "-log-level", "warn", "-node", node)
	if o.ACLToken != "" {
		args = append(args, "-hcl", fmt.Sprintf(
			`acl { enabled = true default_policy = "deny" enable_token_persistence = false tokens { initial_management = %q agent = %q } }`,
			o.ACLToken, o.ACLToken))
	}
	for _, h := range o.HCL {
		args = append(args, "-hcl", h)
	}
	c := &Consul{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort), t: t, bin: bin, args: args,
		fixedHTTP: o.HTTPPort != 0, token: o.ACLToken}
	cli, err := api.NewClient(&api.Config{Address: c.Addr, Token: o.ACLToken})
	if err != nil {
		t.Fatalf("consul client: %v", err)
	}
	c.Client = cli
	t.Cleanup(c.Stop)
	return c
}

// StartConsulWith is StartConsul with options.
func StartConsulWith(t testing.TB, o ConsulOptions) *Consul {
	t.Helper()
	c := NewConsul(t, o)
	c.Start()
	return c
}

// Start starts a prepared (or stopped) agent and waits until it has a
// leader. Starting a running agent fails the test.
func (c *Consul) Start() {
	c.t.Helper()
	c.mu.Lock()
	running := c.cmd != nil && !c.stopped
	c.mu.Unlock()
	if running {
		c.t.Fatalf("consul at %s is already running", c.Addr)
	}
	c.start()
}

// Peer peers two agents through the peering API, as an operator would:
// acceptor generates a token for a peer named dialerName, dialer
// establishes it under the name acceptorName; it waits until the dialer
// sees the peering ACTIVE. The acceptor must have been started with
// Peering set.
func Peer(t testing.TB, acceptor, dialer *Consul, acceptorName, dialerName string) {
	t.Helper()
	tok, _, err := acceptor.Client.Peerings().GenerateToken(context.Background(), api.PeeringGenerateTokenRequest{PeerName: dialerName}, nil)
	if err != nil {
		t.Fatalf("peering token: %v", err)
	}
	if _, _, err := dialer.Client.Peerings().Establish(context.Background(),
		api.PeeringEstablishRequest{PeerName: acceptorName, PeeringToken: tok.PeeringToken}, nil); err != nil {
		t.Fatalf("establish peering: %v", err)
	}
	Eventually(t, 30*time.Second, "peering "+acceptorName+" to become active", func() bool {
		p, _, err := dialer.Client.Peerings().Read(context.Background(), acceptorName, nil)
		return err == nil && p != nil && p.State == api.PeeringStateActive
	})
}

// Export makes services of c visible to a peer (an exported-services
// config entry of the default partition).
func (c *Consul) Export(t testing.TB, peer string, services ...string) {
	t.Helper()
	e := &api.ExportedServicesConfigEntry{Name: "default"}
	for _, s := range services {
		e.Services = append(e.Services, api.ExportedService{Name: s, Consumers: []api.ServiceConsumer{{Peer: peer}}})
	}
	if _, _, err := c.Client.ConfigEntries().Set(e, nil); err != nil {
		t.Fatalf("export %v to %s: %v", services, peer, err)
	}
}

// Pid is the agent's process id (0 when it is not running).
func (c *Consul) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.stopped || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// SerfLANAddr is the address other agents join the agent's LAN pool at.
func (c *Consul) SerfLANAddr() string {
	for i := 0; i+1 < len(c.args); i++ {
		if c.args[i] == "-serf-lan-port" {
			return "127.0.0.1:" + c.args[i+1]
		}
	}
	return ""
}
