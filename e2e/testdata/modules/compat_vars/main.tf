# Compatibility fixture: task variables (variable_files and variables) of
# every kind of type, written as JSON into var.dir.
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

variable "a_string" {
  type = string
}

variable "a_number" {
  type = number
}

variable "a_bool" {
  type = bool
}

variable "a_list" {
  type = list(string)
}

variable "a_map" {
  type = map(number)
}

variable "an_object" {
  type = object({
    name  = string
    port  = number
    tags  = list(string)
    inner = object({ on = bool })
  })
}

variable "untyped" {
  default = "default value"
}

resource "local_file" "vars" {
  filename = "${var.dir}/vars.json"
  content = jsonencode({
    a_string  = var.a_string
    a_number  = var.a_number
    a_bool    = var.a_bool
    a_list    = var.a_list
    a_map     = var.a_map
    an_object = var.an_object
    untyped   = var.untyped
  })
}
