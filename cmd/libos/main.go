// Command libos runs agent processes on a libos runtime directory.
package main

func main() {}
