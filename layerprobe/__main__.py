from layerprobe.cli import main

main()
