# A module with no provider whose first apply takes var.sleep seconds (a
# local-exec provisioner runs when the resource is created), so that a test
# can act while a remote run is applying. It records the instance ids it is
# given, like ../ids; later changes update them in place, without the wait.
variable "services" {
  type = any
}

variable "sleep" {
  type    = number
  default = 0
}

resource "terraform_data" "ids" {
  input = "slow:${join(",", sort([for s in var.services : s.id]))}"

  provisioner "local-exec" {
    command = "sleep ${var.sleep}"
  }
}
