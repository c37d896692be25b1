high_availability {
  cluster {
    name = "cts-cluster"
    storage "consul" {
      parent_path = "cts"
      namespace   = "ns"
      session_ttl = "30s"
    }
  }
  instance {
    address = "cts-01.example.com"
  }
}
