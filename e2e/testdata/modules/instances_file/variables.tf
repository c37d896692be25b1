variable "services" {
  type = map(object({
    id      = string
    name    = string
    address = string
    port    = number
  }))
}
