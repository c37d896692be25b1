package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/task"
)

// This file holds the configuration of ctsync's operator features (ctsync
// extensions, none of them in CTS): notification blocks, a task's
// drift_detection block, and the redaction of secret values in anything
// the daemon serves (run logs, event log tails, notifications).

// Notification kinds: what a notification block can subscribe to.
const (
	// NotifyFailed is a task run that failed.
	NotifyFailed = "failed"
	// NotifyRecovered is a successful run after a failed one.
	NotifyRecovered = "recovered"
	// NotifyDrift is a drift check that found changes made outside
	// Terraform.
	NotifyDrift = "drift"
	// NotifyApproval is what happened to a plan a safety gate holds:
	// held, approved, rejected, expired or superseded.
	NotifyApproval = "approval"
	// NotifyPolicy is a run denied by the task's policy.
	NotifyPolicy = "policy"
	// NotifyRemoval is a step of a removal that removal_delay holds
	// down: pending, cancelled (it came back) or applied.
	NotifyRemoval = "removal"
)

// NotificationEvents are the kinds a notification block may list; a block
// without events gets them all.
var NotificationEvents = []string{NotifyFailed, NotifyRecovered, NotifyDrift, NotifyApproval, NotifyPolicy, NotifyRemoval}

// Notification defaults and bounds.
const (
	DefaultNotificationTimeout = 10 * time.Second
	DefaultNotificationRetries = 3
	MaxNotificationRetries     = 10
)

// Notification is a `notification "webhook" { ... }` block: events are
// POSTed as JSON to URL.
type Notification struct {
	// Type is the block label; "webhook" is the only type.
	Type string
	// Name identifies the notifier in logs and metrics; default
	// "webhook-<n>", n counting notification blocks from 1 in file order.
	Name string
	// URL receives the POST. It is treated as a secret (webhook URLs often
	// hold a token): logs show its host only.
	URL string
	// Events are the kinds sent (NotificationEvents).
	Events []string
	// Headers are added to every request. Values are secrets: never logged.
	Headers map[string]string
	// Timeout bounds each attempt (default 10s).
	Timeout time.Duration
	// Retries is how many times a failed delivery is retried, with
	// exponential backoff (default 3).
	Retries int
	// Range is where the block was declared.
	Range hcl.Range
}

// Wants reports whether the notification subscribes to kind.
func (n *Notification) Wants(kind string) bool { return slices.Contains(n.Events, kind) }

var notificationKeys = attrs("name", "url", "events", "headers", "timeout", "retries")

// notifications decodes the file's notification blocks into r.
func (d *decoder) notifications(c *content, r *rawConfig) {
	for _, b := range c.blocks["notification"] {
		if n, ok := d.notification(b, len(r.notifications)+1); ok {
			r.notifications = append(r.notifications, n)
		}
	}
}

func (d *decoder) notification(b *hcl.Block, index int) (Notification, bool) {
	path := blockPath("", b)
	errsBefore := len(d.errs)
	n := Notification{Type: b.Labels[0], Range: b.DefRange}
	if n.Type != "webhook" {
		d.errf(labelRange(b, 0), path, `unsupported notification type %q: the only type is "webhook"`, n.Type)
		return n, false
	}
	c := d.content(b.Body, path, notificationKeys, nil)

	n.Name = fmt.Sprintf("webhook-%d", index)
	if s := d.str(c, "name", path); s.Set {
		if strings.TrimSpace(s.V) == "" {
			d.errf(s.Rng, join(path, "name"), "cannot be empty")
		}
		n.Name = s.V
	}

	if s := d.str(c, "url", path); !s.Set {
		if c.attr("url") == nil {
			d.errf(c.missing, join(path, "url"), "is required")
		}
	} else if u, err := url.Parse(s.V); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL may hold a token: the message does not repeat it.
		d.errf(s.Rng, join(path, "url"), "must be an absolute http:// or https:// URL")
	} else {
		n.URL = s.V
	}

	n.Events = NotificationEvents
	if evs, elems := d.strList(c, "events", path); evs.Set {
		n.Events = nil
		for i, e := range evs.V {
			rng := evs.Rng
			if i < len(elems) {
				rng = elems[i]
			}
			field := fmt.Sprintf("%s.events[%d]", path, i)
			switch {
			case !slices.Contains(NotificationEvents, e):
				d.errf(rng, field, "unknown event %q: use %s", e, quoteList(NotificationEvents))
			case slices.Contains(n.Events, e):
				d.errf(rng, field, "event %q is listed twice", e)
			default:
				n.Events = append(n.Events, e)
			}
		}
		if len(evs.V) == 0 {
			d.errf(evs.Rng, join(path, "events"), "cannot be empty: leave events out to get %s", quoteList(NotificationEvents))
		}
	}

	if hs, rngs := d.templStrMap(c, "headers", path); hs.Set {
		n.Headers = map[string]string{}
		for k, v := range hs.V {
			field := join(path, "headers."+k)
			// {{ env }} and {{ with secret }}: secretfields.go.
			rv, pending, tok := d.secretTemplate(v, rngs[k], field, FieldHeader)
			switch {
			case !validHeaderName(k):
				d.errf(rngs[k], field, "is not a valid HTTP header name")
			case !tok:
			case pending:
				n.Headers[k] = "" // resolved from Vault at start-up
				d.pendingSecret(SecretField{Kind: FieldHeader, Name: n.Name, Header: k, Field: field, Range: rngs[k]}, v)
			case strings.ContainsAny(rv, "\r\n\x00"):
				// The value is a secret: not repeated.
				d.errf(rngs[k], field, "the value cannot contain line breaks")
			default:
				n.Headers[k] = rv
			}
		}
	}

	n.Timeout = DefaultNotificationTimeout
	if t := d.duration(c, "timeout", path); t.Set {
		if t.V <= 0 {
			d.errf(t.Rng, join(path, "timeout"), "must be greater than zero")
		}
		n.Timeout = t.V
	}
	n.Retries = DefaultNotificationRetries
	if r := d.integer(c, "retries", path); r.Set {
		if r.V < 0 || r.V > MaxNotificationRetries {
			d.errf(r.Rng, join(path, "retries"), "must be between 0 and %d", MaxNotificationRetries)
		}
		n.Retries = r.V
	}
	return n, len(d.errs) == errsBefore
}

// validHeaderName reports whether s is an HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// checkNotifications reports two notification blocks with the same name.
func (d *decoder) checkNotifications(ns []Notification) []Notification {
	seen := map[string]hcl.Range{}
	for _, n := range ns {
		if prev, dup := seen[n.Name]; dup {
			d.errf(n.Range, fmt.Sprintf("notification %q", n.Type),
				"duplicate notification name %q (first declared at %s): give each block its own name", n.Name, posString(prev))
			continue
		}
		seen[n.Name] = n.Range
	}
	return ns
}

// driftDetection decodes a task's drift_detection { interval, remediate }
// block. The interval's lower bound is a task rule (task.Spec.Validate).
func (d *decoder) driftDetection(c *content, p string, t *rawTask) {
	b := d.onlyOne(c, "drift_detection", p)
	if b == nil {
		return
	}
	path := join(p, "drift_detection")
	dc := d.content(b.Body, path, attrs("interval", "remediate"), nil)
	t.recordAll("drift_detection", dc)
	if dc.attr("interval") == nil {
		d.errf(dc.missing, join(path, "interval"), `is required (how often to check, e.g. "6h")`)
		return
	}
	iv := d.duration(dc, "interval", path)
	rem := d.boolean(dc, "remediate", path)
	if !iv.Set {
		return
	}
	t.spec.DriftDetection = &task.DriftDetection{Interval: task.Duration(iv.V), Remediate: rem.V}
}

// ---- secrets ----

// Secrets returns the configuration's secret values: the Consul token and
// auth password, every string value of terraform_provider arguments
// (nested blocks included) and task_env, the URLs and header values of
// notification blocks, and the API token secrets. Values shorter than redact.MinSecretLength are left out.
// Provider values read from Consul ({{ key }}) are included once
// resolve.Providers has run.
func (c *Config) Secrets() []string {
	var out []string
	add := func(s string) {
		if len(s) >= redact.MinSecretLength && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	add(c.Consul.Token)
	add(c.Consul.Auth.Password)
	if c.TFC != nil {
		add(c.TFC.Token) // tfc.go
	}
	var body func(b *ProviderBody)
	body = func(b *ProviderBody) {
		for _, v := range b.Attrs {
			walkStrings(v, add)
		}
		for i := range b.Blocks {
			body(&b.Blocks[i].Body)
		}
	}
	for i := range c.Providers {
		p := &c.Providers[i]
		body(&p.Args)
		for _, v := range p.TaskEnv {
			add(v)
		}
	}
	for _, n := range c.Notifications {
		add(n.URL)
		for _, v := range n.Headers {
			add(v)
		}
	}
	for _, t := range c.APIAuth.Tokens {
		add(t.Secret)
	}
	return out
}
