module github.com/lbdproject/lbd

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/fsnotify/fsnotify v1.10.1
)

require golang.org/x/sys v0.13.0 // indirect
