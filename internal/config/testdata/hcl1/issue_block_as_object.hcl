buffer_period = { enabled = false }
consul = {
  address = "localhost:8500"
  transport = { dial_timeout = "10s", max_idle_conns_per_host = 300 }
}
task {
  name          = "web"
  module        = "./m"
  buffer_period = { min = "2s" }
  condition = { services = { names = ["x"] } }
}
