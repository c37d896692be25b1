package api

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// Cluster is what the API needs from high availability (internal/ha through
// the daemon's wiring). Options.Cluster is nil without high availability.
type Cluster interface {
	// IsLeader reports whether this instance leads the cluster (and so
	// serves the task and status endpoints).
	IsLeader() bool
	// Leader returns the leader's id and advertised address ("" unknown).
	Leader() (id, address string)
	// Status lists the cluster's members.
	Status(ctx context.Context) (ClusterStatus, error)
}

// ClusterStatus is the cluster as GET /v1/status/cluster shows it.
type ClusterStatus struct {
	ClusterName string
	Members     []ClusterMember
	// SpreadTasks is set in spread mode.
	SpreadTasks bool
}

// ClusterMember is one instance of the cluster.
type ClusterMember struct {
	ID          string `json:"id"`
	ServiceName string `json:"service_name"`
	Healthy     bool   `json:"healthy"`
	Leader      bool   `json:"leader"`
	// Address is the leader's instance.address (leader only, when set);
	// in spread mode every member's.
	Address string `json:"address,omitempty"`
	// Tasks are the tasks the member owns (spread mode only).
	Tasks []string `json:"tasks,omitempty"`
	// Weight is the member's instance.weight (spread mode only).
	Weight int `json:"weight,omitempty"`
}

// ClusterResponse is the body of GET /v1/status/cluster.
type ClusterResponse struct {
	ClusterName string          `json:"cluster_name"`
	Members     []ClusterMember `json:"members"`
	// SpreadTasks is true in spread mode (ctsync).
	SpreadTasks bool   `json:"spread_tasks,omitempty"`
	RequestID   string `json:"request_id"`
}

// LeaderHeader carries the leader's address (or, when it has none, its
// id) on the error a follower returns, so that a client can retry there.
const LeaderHeader = "X-Ctsync-Leader"

// StaleHeader is set on a follower's answer to a ?stale read: it comes from
// the follower's copy of the cluster's state, which may lag the leader's by
// a few seconds.
const StaleHeader = "X-Ctsync-Stale"

// staleRead reports whether r is a GET or HEAD with the stale query
// parameter, which followers answer themselves.
func staleRead(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Query().Has("stale")
}

// clusterStatusTimeout bounds the Consul query behind /v1/status/cluster.
const clusterStatusTimeout = 10 * time.Second

// clusterGate answers, on a follower, every /v1/status* and /v1/tasks*
// request except /v1/status/cluster and ?stale reads with 400 and the CTS
// message naming the leader. It is not an HTTP redirect: CTS clients expect
// this error.
func (s *Server) clusterGate(next http.Handler) http.Handler {
	if s.opts.Cluster == nil {
		return next
	}
	if sc, ok := s.spreadCluster(); ok {
		return s.spreadGate(sc, next) // spread.go
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		gated := p == "/v1/status" || strings.HasPrefix(p, "/v1/status/") || p == "/v1/tasks" || strings.HasPrefix(p, "/v1/tasks/")
		if !gated || p == "/v1/status/cluster" || s.opts.Cluster.IsLeader() {
			next.ServeHTTP(w, r)
			return
		}
		id, addr := s.opts.Cluster.Leader()
		if staleRead(r) {
			// ?stale (ctsync extension, as Consul's): a read answered
			// from this follower's copy of the cluster's state, which it
			// refreshes from Consul KV (the dashboard asks this way).
			w.Header().Set(StaleHeader, "true")
			next.ServeHTTP(w, r)
			return
		}
		msg := "redirect requests to leader"
		switch {
		case id != "" && addr != "":
			msg += " '" + id + "' at " + addr
			w.Header().Set(LeaderHeader, addr)
		case id != "":
			msg += " '" + id + "'"
			w.Header().Set(LeaderHeader, id)
		}
		writeError(w, r, http.StatusBadRequest, msg)
	})
}

// getClusterStatus serves GET /v1/status/cluster: 405 without high
// availability (as CTS), else the members, on every instance.
func (s *Server) getClusterStatus(w http.ResponseWriter, r *http.Request) {
	if s.opts.Cluster == nil {
		writeError(w, r, http.StatusMethodNotAllowed, "this endpoint is only available with high availability configured")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), clusterStatusTimeout)
	defer cancel()
	st, err := s.opts.Cluster.Status(ctx)
	if err != nil {
		s.log.Warn("cluster status failed", "request_id", requestID(r), "error", err)
		writeError(w, r, http.StatusInternalServerError, "reading the cluster members from consul: "+err.Error())
		return
	}
	members := st.Members
	if members == nil {
		members = []ClusterMember{}
	}
	writeJSON(w, http.StatusOK, ClusterResponse{ClusterName: st.ClusterName, Members: members, SpreadTasks: st.SpreadTasks, RequestID: requestID(r)})
}
