# Test fixture: writes the intentions it receives, as JSON, into var.dir.
terraform {
  required_providers {
    local = { source = "hashicorp/local" }
  }
}

variable "services" {
  type = any
}

variable "intentions" {
  type = list(object({
    source_name           = string
    source_namespace      = string
    source_partition      = string
    source_peer           = string
    source_sameness_group = string
    source_type           = string
    destination_name      = string
    destination_namespace = string
    destination_partition = string
    action                = string
    permissions           = string
    precedence            = number
    description           = string
    meta                  = map(string)
  }))
}

variable "dir" {
  type = string
}

resource "local_file" "intentions" {
  filename = "${var.dir}/intentions.json"
  content  = jsonencode(var.intentions)
}
