variable "services" {
  description = "Consul services, as ctsync (and Consul-Terraform-Sync) provides them."
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

variable "service_name" {
  description = "Which service's instances become upstream servers."
  type        = string
}

variable "upstream_name" {
  description = "The nginx upstream name."
  type        = string
  default     = "backend"

  # It is written into nginx's configuration as is.
  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,64}$", var.upstream_name))
    error_message = "The upstream_name must be 1 to 64 letters, digits, underscores or dashes."
  }
}

variable "upstream_file" {
  description = "Where to write the upstream block (included by nginx.conf)."
  type        = string
}

variable "reload_command" {
  description = "Command that reloads nginx after the file changes; empty to skip."
  type        = string
  default     = ""
}
