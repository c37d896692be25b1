# Compatibility fixture: a module written for CTS that takes only the
# services variable, with the exact CTS type, and writes what it receives as
# JSON into var.dir.
terraform {
  required_providers {
    local = { source = "hashicorp/local" }
  }
}

variable "services" {
  description = "Consul services monitored by the task (CTS service definition protocol v0)"
  type = map(object({
    id                    = string
    name                  = string
    kind                  = string
    address               = string
    port                  = number
    meta                  = map(string)
    tags                  = list(string)
    namespace             = string
    status                = string
    node                  = string
    node_id               = string
    node_address          = string
    node_datacenter       = string
    node_tagged_addresses = map(string)
    node_meta             = map(string)
    cts_user_defined_meta = map(string)
  }))
}

variable "dir" {
  description = "Where to write what the module received"
  type        = string
}

resource "local_file" "services" {
  filename = "${var.dir}/services.json"
  content  = jsonencode(var.services)
}
