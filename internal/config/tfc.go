package config

import (
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/ctsync/ctsync/internal/task"
)

// Environment variables read by the terraform-cloud driver block when the
// matching field is not set in the configuration (as CTS Enterprise).
const (
	EnvTFCHostname     = "TFC_HOSTNAME"
	EnvTFCOrganization = "TFC_ORGANIZATION"
	EnvTFCToken        = "TFC_TOKEN"
)

// DefaultTFCHostname is HCP Terraform's address.
const DefaultTFCHostname = "https://app.terraform.io"

// TFCDriver is the driver "terraform-cloud" block: every task runs
// remotely in an HCP Terraform / Terraform Enterprise workspace.
type TFCDriver struct {
	// Address is the server's base URL (scheme and host, e.g.
	// https://app.terraform.io); Hostname as written (or TFC_HOSTNAME).
	Address  string
	Hostname string
	// Organization holds the workspaces; Token is a team or user token.
	Organization string
	Token        string
	// WorkspacePrefix is prepended to a task's name to name its
	// workspace (workspaces.prefix, or the deprecated workspace_prefix
	// followed by "-").
	WorkspacePrefix string
	// Tags are added to every workspace the driver uses.
	Tags []string
	// TagsAllowlist: an existing workspace must carry at least one of
	// these tags; TagsDenylist: it must carry none of these.
	TagsAllowlist []string
	TagsDenylist  []string
	// RequiredProviders as in driver "terraform".
	RequiredProviders map[string]RequiredProvider
	// TLS secures the connection to the server.
	TLS TFCTLS
	// Range is where the block was declared.
	Range hcl.Range
}

// TFCTLS is the terraform-cloud driver's tls block.
type TFCTLS struct {
	Enabled    bool
	CACert     string
	CAPath     string
	Cert       string
	Key        string
	ServerName string
	// Verify is true unless verify = false.
	Verify bool
}

// WorkspaceName is the workspace of a task: <prefix><task>.
func (t *TFCDriver) WorkspaceName(taskName string) string { return t.WorkspacePrefix + taskName }

type rawTFC struct {
	set                  bool
	rng                  hcl.Range
	hostname, org, token opt[string]
	prefix, oldPrefix    opt[string]
	tags, allow, deny    opt[[]string]
	required             map[string]RequiredProvider
	rawClientTLS         // tls { ... } (clienttls.go)
}

var tfcKeys = []key{
	{name: "hostname"}, {name: "organization"}, {name: "token"}, {name: "workspace_prefix"},
	{name: "workspaces", kind: kBlock}, {name: "tls", kind: kBlock},
	{name: "required_providers", kind: kMap},
}

var tfcRejects = map[string]string{
	"path":        `belongs to driver "terraform": the terraform-cloud driver runs no local Terraform`,
	"backend":     `belongs to driver "terraform": with the terraform-cloud driver the workspace holds the state`,
	"log":         `belongs to driver "terraform": run logs are kept in the workspace (and in the task's run log)`,
	"persist_log": `belongs to driver "terraform"`,
}

// tfcBlock decodes driver "terraform-cloud" { ... } into r.
func (d *decoder) tfcBlock(b *hcl.Block, r *rawTFC) {
	path := blockPath("", b)
	c := d.content(b.Body, path, tfcKeys, tfcRejects)
	r.set, r.rng = true, b.DefRange
	r.hostname.merge(d.str(c, "hostname", path))
	r.org.merge(d.str(c, "organization", path))
	r.token.merge(d.templStr(c, "token", path)) // {{ env }}, {{ with secret }}: secretfields.go
	if p := d.str(c, "workspace_prefix", path); p.Set {
		d.warnf(p.Rng, join(path, "workspace_prefix"), `is deprecated: use workspaces { prefix = "..." } (workspace_prefix adds a "-" after the prefix)`)
		r.oldPrefix.merge(p)
	}
	if wb := d.onlyOne(c, "workspaces", path); wb != nil {
		p := join(path, "workspaces")
		wc := d.content(wb.Body, p, attrs("prefix", "tags", "tags_allowlist", "tags_denylist"), nil)
		r.prefix.merge(d.str(wc, "prefix", p))
		tags, _ := d.strList(wc, "tags", p)
		r.tags.merge(tags)
		allow, _ := d.strList(wc, "tags_allowlist", p)
		r.allow.merge(allow)
		deny, _ := d.strList(wc, "tags_denylist", p)
		r.deny.merge(deny)
	}
	if tb := d.onlyOne(c, "tls", path); tb != nil {
		d.clientTLS(tb, join(path, "tls"), &r.rawClientTLS)
	}
	var rd rawDriver
	d.requiredProviders(c, path, &rd)
	for k, v := range rd.required {
		if r.required == nil {
			r.required = map[string]RequiredProvider{}
		}
		r.required[k] = v
	}
}

// tfcWorkspace decodes a task's terraform_cloud_workspace block and the
// deprecated task-level terraform_version.
func (d *decoder) tfcWorkspace(c *content, p string, t *rawTask) {
	var ws task.TFCWorkspace
	set := false
	if v := d.str(c, "terraform_version", p); v.Set {
		d.warnf(v.Rng, join(p, "terraform_version"), `is deprecated: use terraform_cloud_workspace { terraform_version = "..." }`)
		ws.TerraformVersion, set = v.V, true
	}
	if b := d.onlyOne(c, "terraform_cloud_workspace", p); b != nil {
		path := join(p, "terraform_cloud_workspace")
		wc := d.content(b.Body, path, attrs("execution_mode", "agent_pool_id", "agent_pool_name", "terraform_version"), nil)
		t.recordAll("terraform_cloud_workspace", wc)
		set = true
		if m := d.str(wc, "execution_mode", path); m.Set {
			switch v := strings.ToLower(strings.TrimSpace(m.V)); v {
			case task.ExecutionRemote, task.ExecutionAgent:
				ws.ExecutionMode = v
			case "local":
				d.errf(m.Rng, join(path, "execution_mode"), `"local" cannot be used: the terraform-cloud driver runs tasks in the workspace; use "remote" or "agent" (or driver "terraform" to run locally)`)
			default:
				d.errf(m.Rng, join(path, "execution_mode"), `%q is not an execution mode (use "remote" or "agent")`, m.V)
			}
		}
		id := d.str(wc, "agent_pool_id", path)
		name := d.str(wc, "agent_pool_name", path)
		ws.AgentPoolID, ws.AgentPoolName = id.V, name.V
		if v := d.str(wc, "terraform_version", path); v.Set {
			ws.TerraformVersion = v.V
		}
		switch {
		case ws.ExecutionMode == task.ExecutionAgent && id.V == "" && name.V == "":
			d.errf(b.DefRange, join(path, "agent_pool_id"), `execution_mode "agent" needs agent_pool_id or agent_pool_name`)
		case ws.ExecutionMode != task.ExecutionAgent && (id.Set || name.Set):
			rng := id.Rng
			if !id.Set {
				rng = name.Rng
			}
			d.errf(rng, path, `agent_pool_id and agent_pool_name need execution_mode = "agent"`)
		case id.V != "" && name.V != "":
			d.errf(name.Rng, join(path, "agent_pool_name"), "set agent_pool_id or agent_pool_name, not both")
		}
	}
	if set {
		t.spec.TFCWorkspace = &ws
	}
}

// finishTFC applies the terraform-cloud driver's defaults (environment
// variables included) and checks it against the rest of the
// configuration.
func (d *decoder) finishTFC(r *rawConfig, cfg *Config) {
	if !r.tfc.set {
		for _, t := range r.tasks {
			if t.spec.TFCWorkspace == nil {
				continue
			}
			field := "terraform_cloud_workspace"
			rng, ok := t.ranges[field]
			if !ok {
				field = "terraform_version"
				if rng, ok = t.ranges[field]; !ok {
					rng = t.rng
				}
			}
			d.errf(rng, t.disp+"."+field, `needs driver "terraform-cloud" (with driver "terraform" tasks run locally)`)
		}
		return
	}
	x := &r.tfc
	const path = `driver "terraform-cloud"`
	if dr := &r.driver; dr.path.Set || dr.log.Set || dr.persistLog.Set || dr.backend != nil || dr.required != nil {
		d.errf(x.rng, path, `only one driver can be configured: driver "terraform" is also set`)
	}
	fromEnv := func(o opt[string], env string) string {
		if o.Set {
			return o.V
		}
		return os.Getenv(env)
	}
	t := &TFCDriver{
		Hostname:          fromEnv(x.hostname, EnvTFCHostname),
		Organization:      fromEnv(x.org, EnvTFCOrganization),
		Token:             fromEnv(x.token, EnvTFCToken),
		Tags:              x.tags.V,
		TagsAllowlist:     x.allow.V,
		TagsDenylist:      x.deny.V,
		RequiredProviders: x.required,
		Range:             x.rng,
		TLS: TFCTLS{Enabled: x.tlsEnabled.V, Verify: x.tlsVerify.or(true), CACert: x.caCert.V, CAPath: x.caPath.V,
			Cert: x.cert.V, Key: x.key.V, ServerName: x.serverName.V},
	}
	where := func(o opt[string]) hcl.Range {
		if o.Set {
			return o.Rng
		}
		return x.rng
	}
	if t.Hostname == "" {
		t.Hostname = DefaultTFCHostname
	}
	addr, err := tfcAddress(t.Hostname)
	if err != nil {
		d.errf(where(x.hostname), path+".hostname", "%q: %v", t.Hostname, err)
	}
	t.Address = addr
	if t.Organization == "" {
		d.errf(where(x.org), path+".organization", "is required (or set %s)", EnvTFCOrganization)
	}
	if t.Token == "" {
		d.errf(where(x.token), path+".token", "is required (or set %s): a team or user token of the organization", EnvTFCToken)
	}
	switch {
	case x.prefix.Set && x.oldPrefix.Set:
		d.errf(x.oldPrefix.Rng, path+".workspace_prefix", "cannot be used with workspaces.prefix")
	case x.prefix.Set:
		t.WorkspacePrefix = x.prefix.V
	case x.oldPrefix.Set && x.oldPrefix.V != "":
		t.WorkspacePrefix = x.oldPrefix.V + "-"
	}
	for _, tag := range t.Tags {
		if slices.Contains(t.TagsDenylist, tag) {
			d.errf(x.tags.Rng, path+".workspaces.tags", "tag %q is also in tags_denylist", tag)
		}
	}
	if (t.TLS.Cert == "") != (t.TLS.Key == "") {
		d.errf(x.rng, path+".tls", "cert and key must be set together")
	}
	cfg.TFC = t
}

// tfcAddress turns a hostname ("app.terraform.io", "tfe.example.com:8443"
// or a URL such as "http://127.0.0.1:8080") into the server's base URL. A
// bare hostname means https.
func tfcAddress(h string) (string, error) {
	h = strings.TrimSpace(h)
	if !strings.Contains(h, "://") {
		h = "https://" + h
	}
	u, err := url.Parse(h)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", errString("the scheme must be http or https")
	}
	if u.Host == "" {
		return "", errString("no host")
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return "", errString("give the server's address only (no path or query)")
	}
	return u.Scheme + "://" + u.Host, nil
}

type errString string

func (e errString) Error() string { return string(e) }
