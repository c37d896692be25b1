# variables for the web task
replicas = 2
owner    = "team-web"
tags     = ["a", "b"]
settings = {
  size = "large"
  on   = true
}
