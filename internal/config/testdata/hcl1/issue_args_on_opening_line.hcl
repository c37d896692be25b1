buffer_period { enabled = true
  min = "5s" }
task { name = "web"
  module = "./m"
  condition "consul-kv" { path = "cfg/web"
    recurse = true }
}
