package config

import (
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Syslog is the syslog block: log lines also go to the local syslog
// daemon (CTS schema).
type Syslog struct {
	// Enabled is implicit when facility or name is set.
	Enabled  bool
	Facility string // default "LOCAL0"; upper case
	Name     string // the syslog tag; default "consul-terraform-sync"
}

// Syslog defaults (CTS).
const (
	DefaultSyslogFacility = "LOCAL0"
	DefaultSyslogName     = "consul-terraform-sync"
)

// SyslogFacilities are the facility names accepted, with their numbers.
var SyslogFacilities = map[string]int{
	"KERN": 0, "USER": 1, "MAIL": 2, "DAEMON": 3, "AUTH": 4, "SYSLOG": 5, "LPR": 6, "NEWS": 7,
	"UUCP": 8, "CRON": 9, "AUTHPRIV": 10, "FTP": 11,
	"LOCAL0": 16, "LOCAL1": 17, "LOCAL2": 18, "LOCAL3": 19, "LOCAL4": 20, "LOCAL5": 21, "LOCAL6": 22, "LOCAL7": 23,
}

type rawSyslog struct {
	enabled        opt[bool]
	facility, name opt[string]
}

func (d *decoder) syslogBlock(b *hcl.Block, r *rawSyslog) {
	const path = "syslog"
	c := d.content(b.Body, path, attrs("enabled", "facility", "name"), nil)
	r.enabled.merge(d.boolean(c, "enabled", path))
	if f := d.str(c, "facility", path); f.Set {
		f.V = strings.ToUpper(strings.TrimSpace(f.V))
		if _, ok := SyslogFacilities[f.V]; !ok {
			d.errf(f.Rng, "syslog.facility", "%q is not a syslog facility (use LOCAL0 to LOCAL7, USER, DAEMON, ...)", f.V)
		} else {
			r.facility.merge(f)
		}
	}
	r.name.merge(d.str(c, "name", path))
}

func (d *decoder) syslogConfig(r *rawSyslog) Syslog {
	return Syslog{
		Enabled:  r.enabled.or(r.facility.Set || r.name.Set),
		Facility: nonEmpty(r.facility.V, DefaultSyslogFacility),
		Name:     nonEmpty(r.name.V, DefaultSyslogName),
	}
}
