# Test fixture: the downstream task of a chain. It writes what the upstream
# task "up" reported (its output "ids") next to the instances it was given
# itself: "<up ids>|<own ids>|<up count>".
terraform {
  required_providers {
    local = { source = "hashicorp/local" }
  }
}

variable "services" {
  type = any
}

variable "task_outputs" {
  type = any
}

variable "dir" {
  type = string
}

resource "local_file" "chain" {
  filename = "${var.dir}/chain.txt"
  content  = "${var.task_outputs["up"]["ids"]}|${join(",", sort([for s in values(var.services) : s.id]))}|${var.task_outputs["up"]["count"]}"
}
