package metrics

import "github.com/prometheus/client_golang/prometheus"

// MemoryStats is the state of the Terraform memory budget (driver
// "terraform" max_memory) as the metrics read it.
type MemoryStats struct {
	Limit    int64 // bytes; 0: no bound
	Reserved int64 // bytes reserved by the commands running
	Waiting  int   // commands waiting for memory
}

// registerTerraform adds the metrics of the Terraform processes: the peak
// RSS of each task's last command, and the memory budget when opts.Memory
// reads it.
func (m *Metrics) registerTerraform(opts Options) {
	m.tfPeakRSS = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ctsync_terraform_peak_rss_bytes",
		Help: "Peak resident memory of the task's last Terraform command (plan, apply or destroy): the largest sum, sampled, of the peaks of Terraform and its provider plugins.",
	}, []string{"task"})
	m.perTask = append(m.perTask, m.tfPeakRSS)
	m.reg.MustRegister(m.tfPeakRSS)
	if opts.Memory == nil {
		return
	}
	for _, g := range []struct {
		name, help string
		value      func(MemoryStats) float64
	}{
		{"ctsync_terraform_memory_limit_bytes", "The memory budget of the Terraform commands running at once (driver \"terraform\" max_memory, or derived from the machine's memory).",
			func(s MemoryStats) float64 { return float64(s.Limit) }},
		{"ctsync_terraform_memory_reserved_bytes", "Memory reserved by the Terraform commands running: each one's expected peak, or its measured one when larger.",
			func(s MemoryStats) float64 { return float64(s.Reserved) }},
		{"ctsync_terraform_memory_waiting", "Terraform commands waiting for memory to start.",
			func(s MemoryStats) float64 { return float64(s.Waiting) }},
	} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help},
			func() float64 { return g.value(opts.Memory()) }))
	}
}

// TerraformPeakRSS records the peak RSS of a task's last Terraform command.
func (m *Metrics) TerraformPeakRSS(task string, bytes int64) {
	m.touch(task)
	m.tfPeakRSS.WithLabelValues(task).Set(float64(bytes))
}
