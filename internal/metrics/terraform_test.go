package metrics

import "testing"

func TestTerraformMemoryMetrics(t *testing.T) {
	list := &tasks{}
	list.set(state("web", false), state("db", false))
	m := New(Options{Tasks: list.get, Memory: func() MemoryStats {
		return MemoryStats{Limit: 2 << 30, Reserved: 300 << 20, Waiting: 2}
	}})
	m.TerraformPeakRSS("web", 150<<20)
	m.TerraformPeakRSS("db", 80<<20)
	text := scrape(t, m)
	has(t, text,
		`ctsync_terraform_peak_rss_bytes{task="web"} 1.572864e+08`,
		`ctsync_terraform_peak_rss_bytes{task="db"} 8.388608e+07`,
		`ctsync_terraform_memory_limit_bytes 2.147483648e+09`,
		`ctsync_terraform_memory_reserved_bytes 3.145728e+08`,
		`ctsync_terraform_memory_waiting 2`)
	// A deleted task's series goes.
	list.set(state("web", false))
	hasNot(t, scrape(t, m), `ctsync_terraform_peak_rss_bytes{task="db"}`)
}
