package ha

import (
	"context"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
)

// ClusterTag is the tag every instance of a cluster adds to its
// self-registration (CTS: cts-cluster:<cluster name>).
func ClusterTag(cluster string) string { return "cts-cluster:" + cluster }

// Member is one instance of the cluster as GET /v1/status/cluster shows it.
type Member struct {
	ID          string
	ServiceName string
	// Healthy is the Consul health of the instance's service (every check
	// passing).
	Healthy bool
	Leader  bool
	// Address is the leader's advertised address (instance.address), only
	// for the leader and only when it is set.
	Address string
}

// Members lists the cluster from the self-registrations in Consul
// (Registered), with this elector's view of the leader.
func (e *Elector) Members(ctx context.Context, cluster, serviceName string) ([]Member, error) {
	leaderID, leaderAddr := e.Leader()
	return Registered(ctx, e.o.Client, cluster, serviceName, e.o.ID, e.o.Address, leaderID, leaderAddr)
}

// Registered lists the cluster from the self-registrations in Consul: the
// instances of serviceName tagged with the cluster tag. The leader ("" when
// none) and this instance (selfID, selfAddr) are listed even when they are
// not registered (registration disabled or lost): both are known to be
// alive, this one because it answers and the leader because its session
// holds the lock.
func Registered(ctx context.Context, client *api.Client, cluster, serviceName, selfID, selfAddr, leaderID, leaderAddr string) ([]Member, error) {
	q := (&api.QueryOptions{}).WithContext(ctx)
	entries, _, err := client.Health().Service(serviceName, ClusterTag(cluster), false, q)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []Member
	for _, en := range entries {
		if en.Service == nil || seen[en.Service.ID] {
			continue
		}
		seen[en.Service.ID] = true
		m := Member{ID: en.Service.ID, ServiceName: en.Service.Service,
			Healthy: en.Checks.AggregatedStatus() == api.HealthPassing, Leader: en.Service.ID == leaderID}
		if m.Leader {
			m.Address = leaderAddr
		}
		out = append(out, m)
	}
	add := func(id, addr string) {
		if id == "" || seen[id] {
			return
		}
		seen[id] = true
		m := Member{ID: id, ServiceName: serviceName, Healthy: true, Leader: id == leaderID}
		if m.Leader {
			m.Address = addr
		}
		out = append(out, m)
	}
	add(selfID, selfAddr)
	add(leaderID, leaderAddr)
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
