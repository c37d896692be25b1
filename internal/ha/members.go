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
	return Registered(ctx, e.o.Client, Lookup{Cluster: cluster, ServiceName: serviceName,
		SelfID: e.o.ID, SelfAddr: e.o.Address, LeaderID: leaderID, LeaderAddr: leaderAddr})
}

// Lookup says which cluster Registered lists and what this instance knows
// of it.
type Lookup struct {
	// Cluster is the cluster's name (its tag, ClusterTag) and ServiceName
	// the service the instances register as.
	Cluster, ServiceName string
	// SelfID and SelfAddr are this instance's ID and advertised address.
	SelfID, SelfAddr string
	// LeaderID is the leader's ID ("" when none) and LeaderAddr its
	// advertised address.
	LeaderID, LeaderAddr string
}

// Registered lists the cluster from the self-registrations in Consul: the
// instances of l.ServiceName tagged with the cluster tag. The leader and
// this instance are listed even when they are not registered (registration
// disabled or lost): both are known to be alive, this one because it
// answers and the leader because its session holds the lock.
func Registered(ctx context.Context, client *api.Client, l Lookup) ([]Member, error) {
	serviceName, leaderID := l.ServiceName, l.LeaderID
	q := (&api.QueryOptions{}).WithContext(ctx)
	entries, _, err := client.Health().Service(serviceName, ClusterTag(l.Cluster), false, q)
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
			m.Address = l.LeaderAddr
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
	add(l.SelfID, l.SelfAddr)
	add(l.LeaderID, l.LeaderAddr)
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
