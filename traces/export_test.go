package traces

// BundleRecorded exposes bundleRecorded to the tests of package traces_test.
var BundleRecorded = bundleRecorded
