# Test fixture: writes the nodes it receives, as JSON, into var.dir.
terraform {
  required_providers {
    local = { source = "hashicorp/local" }
  }
}

variable "services" {
  type = any
}

variable "nodes" {
  type = list(object({
    id               = string
    node             = string
    address          = string
    datacenter       = string
    tagged_addresses = map(string)
    meta             = map(string)
  }))
}

variable "dir" {
  type = string
}

resource "local_file" "nodes" {
  filename = "${var.dir}/nodes.json"
  content  = jsonencode(var.nodes)
}
