task {
  name           = "from_file"
  module         = "org/mod/x"
  source_input "services" {
    names = ["api"]
  }
  variable_files = ["testdata/vars/web.tfvars"]
  condition "consul-kv" {
    path                = "cfg"
    source_includes_var = false
  }
}
