package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// deviceProviderVersion is the version scripts/tools.sh mirrors
// tools/device-provider as (ctsync/device).
const deviceProviderVersion = "0.1.0"

// deviceCLIConfig returns a Terraform CLI configuration serving the tools
// mirror, device provider included. It fails the test when `make tools`
// has not built the provider.
func deviceCLIConfig(t *testing.T) string {
	t.Helper()
	mirror := filepath.Join(testutil.ToolsDir(), "mirror")
	bin := filepath.Join(mirror, "registry.terraform.io", "ctsync", "device", deviceProviderVersion,
		runtime.GOOS+"_"+runtime.GOARCH, "terraform-provider-device_v"+deviceProviderVersion)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the device test provider is not in the tools mirror (%v): run make tools", err)
	}
	return writeFile(t, t.TempDir(), "terraformrc", fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.terraform.io/hashicorp/*", "registry.terraform.io/ctsync/device"]
  }
}
disable_checkpoint = true
`, mirror))
}

// deviceModule is a task module making one device object per service
// instance: named as the instance, holding its address and port.
const deviceModule = `terraform {
  required_providers {
    device = { source = "ctsync/device" }
  }
}

variable "services" {}

resource "device_object" "instance" {
  for_each = var.services
  name     = each.value.id
  value    = "${each.value.address}:${each.value.port}"
}
`

// deviceObjects reads the device directory: object name -> value.
func deviceObjects(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue // a write in progress
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		m[e.Name()] = string(b)
	}
	return m
}

func fmtObjects(m map[string]string) string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// waitObjects waits until the device holds exactly want.
func waitObjects(t *testing.T, p *proc, dir, what string, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		got := deviceObjects(t, dir)
		if fmtObjects(got) == fmtObjects(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: device objects %s, want %s\nctsync output:\n%s", what, fmtObjects(got), fmtObjects(want), p.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The device test provider (tools/device-provider, mirrored as
// ctsync/device by make tools) under a real ctsync, Consul and Terraform:
// instances registered become objects, a deregistered one's object is
// deleted, and objects deleted or changed out of band are found by drift
// detection and restored.
func TestDeviceProviderTask(t *testing.T) {
	skipShort(t)
	rc := deviceCLIConfig(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	dev := t.TempDir()
	mod := filepath.Join(work, "module")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, mod, "main.tf", deviceModule)
	cfg := writeFile(t, work, "config.hcl", deviceConfig("DEBUG", work, testutil.FreePort(t), c.Addr, dev, "20ms", fmt.Sprintf(`task {
  name      = "device-task"
  module    = %q
  providers = ["device"]
  condition "services" {
    names = ["web"]
  }
  drift_detection {
    interval  = "2s"
    remediate = true
  }
}
`, mod)))

	register := func(id string, port int) {
		t.Helper()
		c.RegisterService(t, &api.AgentServiceRegistration{ID: id, Name: "web", Address: "10.0.0.1", Port: port}, "passing")
	}
	register("web-1", 8001)
	register("web-2", 8002)
	p := startCtsyncEnv(t, work, []string{"TF_CLI_CONFIG_FILE=" + rc}, "start", "-config-file", cfg)

	want := map[string]string{"web-1": "10.0.0.1:8001", "web-2": "10.0.0.1:8002"}
	waitObjects(t, p, dev, "two instances registered", want)

	register("web-3", 8003)
	want["web-3"] = "10.0.0.1:8003"
	waitObjects(t, p, dev, "a third instance registered", want)

	if err := c.Client.Agent().ServiceDeregister("web-1"); err != nil {
		t.Fatal(err)
	}
	delete(want, "web-1")
	waitObjects(t, p, dev, "web-1 deregistered", want)

	// Out of band: one object deleted, another changed on the device.
	if err := os.Remove(filepath.Join(dev, "web-2")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dev, "web-3", "changed by hand")
	waitObjects(t, p, dev, "drift remediated", want)
	// Terraform's refresh (the provider's Read) saw both: the deleted
	// object is to be created again, the changed one updated (in one
	// drift check or two, as the edits fell between checks).
	testutil.Eventually(t, 30*time.Second, "the drift logged for device-task", func() bool {
		return len(p.lines("drift detected", "task_name=device-task", "add=1")) > 0 &&
			len(p.lines("drift detected", "task_name=device-task", "change=1")) > 0
	})
}

// deviceConfig is the configuration of a daemon that drives the device
// test provider (ctsync/device from the tools mirror): its working_dir
// under work, the API on port, Consul at consulAddr, no buffer period, the
// provider's objects in dev with delay (a duration, "" for none) on every
// read and write; then tasks, the configuration's task blocks.
func deviceConfig(logLevel, work string, port int, consulAddr, dev, delay, tasks string) string {
	provider := fmt.Sprintf("  dir = %q\n", dev)
	if delay != "" {
		provider = fmt.Sprintf("  dir         = %q\n  read_delay  = %q\n  write_delay = %q\n", dev, delay, delay)
	}
	return fmt.Sprintf(`log_level = %q
working_dir = %q
port = %d

consul {
  address = %q
}

buffer_period {
  enabled = false
}

driver "terraform" {
  required_providers {
    device = {
      source  = "ctsync/device"
      version = %q
    }
  }
}

terraform_provider "device" {
%s}

%s`, logLevel, filepath.Join(work, "sync-tasks"), port, consulAddr, deviceProviderVersion, provider, tasks)
}
