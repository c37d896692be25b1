buffer_period { enabled = true, min = "5s" }
consul { address = "127.0.0.1:8500", kv_path = "cts/" }
task {
  name = "web", module = "./m"
  condition "services" { names = ["web", "api"], datacenter = "dc1" }
}
