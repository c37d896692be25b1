# mapstructure's weak typing: strings for numbers and bools, numbers for strings.
port = "8600"
consul {
  transport {
    max_idle_conns = "10"
  }
}
task {
  name    = "web"
  module  = "./m"
  version = 1
  enabled = "true"
  condition "services" {
    names = ["web"]
  }
}
