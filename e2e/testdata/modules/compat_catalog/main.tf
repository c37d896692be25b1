# Compatibility fixture: services and catalog_services, with the exact CTS
# types, written as JSON into var.dir.
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

variable "catalog_services" {
  description = "Consul catalog service names and list of all known tags for a given service"
  type        = map(list(string))
}

resource "local_file" "services" {
  filename = "${var.dir}/services.json"
  content  = jsonencode(var.services)
}

resource "local_file" "catalog_services" {
  filename = "${var.dir}/catalog_services.json"
  content  = jsonencode(var.catalog_services)
}
