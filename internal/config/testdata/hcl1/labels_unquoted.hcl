driver terraform {
  backend local {
    path = "state.tfstate"
  }
}
task {
  name   = "web"
  module = "./m"
  condition services {
    names = ["web"]
  }
  module_input consul-kv {
    path = "x"
  }
}
