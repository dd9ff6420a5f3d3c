module github.com/regcache/cache/integration/pins/etcd-client-3.7

go 1.25

require go.etcd.io/etcd/client/v3 v3.7.3
