package ha

import (
	"errors"
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/store"
)

func TestAdvertisedAddress(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"cts-01.example.com", "cts-01.example.com:8558"},
		{"10.0.0.1:9000", "10.0.0.1:9000"},
		{"https://cts.example.com", "https://cts.example.com"},
		{"::1", "[::1]:8558"},
		{"[::1]", "[::1]:8558"},
	} {
		if got := AdvertisedAddress(tc.in, 8558); got != tc.want {
			t.Errorf("AdvertisedAddress(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

type leaderMetrics struct {
	nopMetrics
	leader []bool
}

func (m *leaderMetrics) SetLeader(on bool) { m.leader = append(m.leader, on) }

// The coordinator is chosen from the configuration alone: Solo without a
// high_availability block (with the local store, leading), Leader or
// Spread with one (a follower, with the cluster's store in Consul KV,
// whose writes are fenced from the start).
func TestNewCoordinatorChoosesOnce(t *testing.T) {
	local := store.NewMemory(0)
	m := &leaderMetrics{}
	solo, err := NewCoordinator(CoordinatorOptions{Metrics: m, Local: func() (store.Store, error) { return local, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := solo.(*Solo); !ok || solo.Store() != local || solo.Standby() || solo.Cluster() != nil || len(solo.Parts(nil)) != 0 {
		t.Fatalf("solo: %T store=%v standby=%t", solo, solo.Store() == local, solo.Standby())
	}
	if !slices.Equal(m.leader, []bool{true}) {
		t.Fatalf("solo leadership metric: %v", m.leader)
	}
	if _, err := NewCoordinator(CoordinatorOptions{Local: func() (store.Store, error) { return nil, errors.New("locked") }}); err == nil {
		t.Fatal("solo: the local store's error is lost")
	}

	client, err := api.NewClient(api.DefaultConfig()) // never contacted
	if err != nil {
		t.Fatal(err)
	}
	for _, spread := range []bool{false, true} {
		m := &leaderMetrics{}
		c, err := NewCoordinator(CoordinatorOptions{HA: &config.HA{ClusterName: "prod", SpreadTasks: spread}, Client: client, ID: "a", Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		switch c.(type) {
		case *Leader:
			if spread {
				t.Fatal("spread_tasks: a leader coordinator")
			}
		case *Spread:
			if !spread {
				t.Fatal("a spread coordinator without spread_tasks")
			}
		default:
			t.Fatalf("%T", c)
		}
		if !c.Standby() || c.KillBound() != TimingFor(0).Kill || !slices.Equal(m.leader, []bool{false}) {
			t.Fatalf("spread %t: standby=%t kill=%s leader metric %v", spread, c.Standby(), c.KillBound(), m.leader)
		}
		// Not leading, not a member: refused before reaching Consul.
		if err := c.Store().StartRun(t.Context(), "web", "r1"); !errors.Is(err, store.ErrNotLeader) {
			t.Fatalf("spread %t: unfenced write: %v", spread, err)
		}
	}
}
