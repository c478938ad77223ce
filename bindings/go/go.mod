module github.com/libhurray/libhurray/bindings/go

go 1.19
