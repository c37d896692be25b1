# ctsync's conditions and module inputs beyond CTS, in HCL 1's spellings.
consul = { address = "localhost:8500", use_cache = true }

task {
  name = "nodes", module = "org/m/x"
  condition nodes { datacenter = "dc1", filter = "Meta.rack == \"r1\"" node_meta = { zone = "z1" } }
  module_input = [{ intentions = [{ destination_services = [{ names = ["api"] }] }] }]
}

task = [{
  name = "intentions"
  module = "org/m/x"
  condition = { intentions = { namespace = "ns", source_services = { regexp = "^web" }, use_as_module_input = false } }
  module_input services { names = ["db"], status = ["passing", "warning"], peer = "east", partition = "p1" }
}]

task {
  name = "svc"
  module = "org/m/x"
  condition "services" {
    regexp = ""
    status = ["critical", "maintenance"]
  }
  module_input "nodes" {
    filter = "Node != \"x\""
  }
}
