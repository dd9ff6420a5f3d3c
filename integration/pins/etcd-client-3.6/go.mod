module github.com/regcache/cache/integration/pins/etcd-client-3.6

go 1.25

require go.etcd.io/etcd/client/v3 v3.6.16
