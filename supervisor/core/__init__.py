"""The single-controller core: workers, method registration, dispatch modes, binding, groups, colocation, the environment contract, the rendezvous, DataProto."""
