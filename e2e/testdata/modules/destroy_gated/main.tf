# Test fixture: creating it records "created" in var.dir; destroying it
# appends "destroy-started" and then waits until var.dir/gate exists before
# appending "destroyed" -- a destroy that can be caught in the middle.
variable "services" {
  type = any
}

variable "dir" {
  type = string
}

resource "terraform_data" "thing" {
  input = var.dir

  provisioner "local-exec" {
    command = "echo created >> '${self.input}/created'"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "echo started >> '${self.input}/destroy-started'; while [ ! -f '${self.input}/gate' ]; do sleep 0.05; done; echo done >> '${self.input}/destroyed'"
  }
}
